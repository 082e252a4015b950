"""Folding charges into usage totals: the order and batching of folds never change the values.

The reference is the rule applied one charge at a time, in time order, each
to every node on its path: what charging each job inside its own report did.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from fairmatch.accounting.settings import AccountingSettings
from fairmatch.accounting.usage import Charge, Total, after_charge, current_usage, fold, path_to_root

T0 = datetime(2026, 3, 30, 10, 0, tzinfo=UTC)  # a Monday
PARENTS = {"root": "", "physics": "root", "theory": "physics", "chem": "root"}
WHO = [("theory", "alice"), ("theory", "bob"), ("chem", "carol"), ("outside", "zoe")]


def charges(seed: int, n: int = 400, days: float = 10) -> list[Charge]:
    rng = random.Random(seed)
    return [
        Charge(T0 + timedelta(seconds=rng.uniform(0, days * 86400)), *rng.choice(WHO), rng.uniform(1, 5000))
        for _ in range(n)
    ]


def one_by_one(all_charges: list[Charge], accounting: AccountingSettings) -> dict:
    """The reference: each charge in time order, each node of its path in turn."""
    totals: dict = {}
    for c in sorted(all_charges, key=lambda c: c.charged_at):
        for node in path_to_root(c.account, c.owner, PARENTS):
            totals[node] = after_charge(totals.get(node), c.amount, c.charged_at, accounting)
    return totals


@pytest.mark.parametrize("reset", ["none", "daily", "weekly"])
@pytest.mark.parametrize("seed", range(5))
def test_folding_in_batches_in_any_order_gives_the_one_by_one_values(seed, reset):
    """Charges arrive at a fold out of time order (a report commits late) and in batches of
    any size: usage read afterwards is the same, to rounding."""
    accounting = AccountingSettings(half_life_days=2, reset=reset)
    log = charges(seed)
    rng = random.Random(seed)
    shuffled = log[:]
    rng.shuffle(shuffled)  # commit order is not time order
    totals: dict = {}
    start = 0
    while start < len(shuffled):
        size = rng.randint(1, 60)
        fold(totals, shuffled[start : start + size], PARENTS, accounting)
        start += size
    now = T0 + timedelta(days=10, hours=1)
    expected = current_usage(one_by_one(log, accounting), now, accounting)
    got = current_usage(totals, now, accounting)
    assert got.keys() == expected.keys()
    for node, value in expected.items():
        assert got[node] == pytest.approx(value, rel=1e-9, abs=1e-6), node
    assert any(v > 0 for v in got.values())


def test_a_late_charge_is_decayed_to_the_rows_time():
    weekly = AccountingSettings(half_life_days=7)
    row = Total(1000.0, T0 + timedelta(days=7), T0)
    assert after_charge(row, 400.0, T0, weekly) == Total(1200.0, T0 + timedelta(days=7), T0)


def test_a_late_charge_of_an_earlier_period_counts_nothing():
    daily = AccountingSettings(half_life_days=0, reset="daily")
    row = Total(10.0, T0 + timedelta(days=1), T0 + timedelta(days=1))
    assert after_charge(row, 400.0, T0, daily) == row


def test_fold_reports_the_nodes_it_changed_and_charges_each_node_once():
    totals: dict = {}
    changed = fold(totals, [Charge(T0, "theory", "alice", 10.0)], PARENTS, AccountingSettings(half_life_days=0))
    assert changed == {("theory", "alice"), ("theory", ""), ("physics", ""), ("root", "")}
    assert {node: t.usage for node, t in totals.items()} == dict.fromkeys(changed, 10.0)
    assert fold(totals, [], PARENTS, AccountingSettings()) == set()
