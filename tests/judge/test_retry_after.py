"""Retry-After parsing, shared by the judge adapter and the alert webhooks."""

from __future__ import annotations

import time

from judgeflow.judge.retry_after import parse_retry_after


def test_parse_retry_after():
    assert parse_retry_after("1") == 1.0
    assert parse_retry_after("0.25") == 0.25
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None and parse_retry_after("inf") is None
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= parse_retry_after(future) <= 31
