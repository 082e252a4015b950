"""The purge's pauses between batches: none before the first, then `pause_factor` times
as long as the batch before took."""

from __future__ import annotations

import asyncio
import time
from itertools import pairwise

import pytest

from fairmatch.services.retention import _Pacer

pytestmark = pytest.mark.anyio
BATCH_S = 0.1


async def _run(factor: float) -> list[float]:
    """The start times of three batches of BATCH_S each, from the first one's."""
    pace, starts = _Pacer(factor), []
    for _ in range(3):
        async with pace.batch():
            starts.append(time.monotonic())
            await asyncio.sleep(BATCH_S)
    return [t - starts[0] for t in starts]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_each_batch_waits_factor_times_the_one_before(anyio_backend):
    starts = await _run(3.0)
    gaps = [b - a for a, b in pairwise(starts)]
    # each gap: the batch (BATCH_S) and its pause (3 x BATCH_S); a loaded machine only adds
    assert all(4 * BATCH_S <= gap < 4 * BATCH_S + 0.5 for gap in gaps), gaps


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_no_pause_with_factor_0(anyio_backend):
    starts = await _run(0.0)
    gaps = [b - a for a, b in pairwise(starts)]
    assert all(BATCH_S <= gap < 3.5 * BATCH_S for gap in gaps), gaps
