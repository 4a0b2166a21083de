"""Simulation tests: a count of the schedules run, printed at the end of the session. walkit logs
through ``logging``: ``pytest --log-level=DEBUG`` shows its events with a failed test's output."""

from __future__ import annotations

import pytest

from tests.sim._scenario import SCHEDULES_RUN


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SCHEDULES_RUN["total"]:
        terminalreporter.write_line(
            f"walkit simulation: {SCHEDULES_RUN['total']} schedules run "
            f"({SCHEDULES_RUN['failed']} failed, {SCHEDULES_RUN['fenced']} with a fencing "
            f"recovery, {SCHEDULES_RUN['ensemble_changes']} with an ensemble change)"
        )
