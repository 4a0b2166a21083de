"""The rate limit of bad-input warnings, with a clock the test moves."""

from __future__ import annotations

import logging

import pytest

from walkit_bookie.server._badinput import BadInputLog


def test_warnings_are_limited_per_interval_and_drops_are_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="walkit_bookie")
    now = [100.0]
    limiter = BadInputLog(burst=3, interval=60.0, clock=lambda: now[0])
    for i in range(1000):
        limiter.report("bad_message", request_id=i)
    assert limiter.counts == {"bad_message": 1000}
    assert limiter.suppressed == 997
    assert len(caplog.records) == 3
    assert "further bad input is only counted" in caplog.records[-1].getMessage()
    now[0] += 59.0
    limiter.report("bad_frame")
    assert len(caplog.records) == 3  # same interval
    now[0] += 1.0
    limiter.report("bad_frame")
    assert len(caplog.records) == 4
    assert "suppressed_before=998" in caplog.records[-1].getMessage()
    assert limiter.counts == {"bad_message": 1000, "bad_frame": 2}
