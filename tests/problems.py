"""The shape every error answer must have: an RFC 9457 problem."""

from __future__ import annotations

import httpx

PROBLEM_KEYS = {"type", "title", "status", "detail"}


def assert_problem(response: httpx.Response, status: int) -> dict:
    """`response` is an application/problem+json answer of `status`; its body is returned."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body.keys() >= PROBLEM_KEYS, body
    assert body["status"] == status and body["title"] and body["detail"]
    return body
