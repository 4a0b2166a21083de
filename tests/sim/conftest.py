"""Simulation tests: quiet logs (``WALKIT_SIM_LOG=debug`` to see them) and a count of the
schedules run, printed at the end of the session."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
import structlog

from tests.sim._scenario import SCHEDULES_RUN


@pytest.fixture(autouse=True)
def _quiet_structlog() -> Iterator[None]:
    name = os.environ.get("WALKIT_SIM_LOG", "error").upper()
    level = logging.getLevelName(name)
    if not isinstance(level, int):
        level = logging.ERROR
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
    try:
        yield
    finally:
        structlog.configure(**saved)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SCHEDULES_RUN["total"]:
        terminalreporter.write_line(
            f"walkit simulation: {SCHEDULES_RUN['total']} schedules run "
            f"({SCHEDULES_RUN['failed']} failed, {SCHEDULES_RUN['fenced']} with a fencing "
            f"recovery, {SCHEDULES_RUN['ensemble_changes']} with an ensemble change)"
        )
