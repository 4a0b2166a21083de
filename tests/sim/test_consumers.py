"""Durable consumers under random fault schedules, checked by ``check_consumers`` (see
``tests/sim/_consumers.py``): consumer processes die and restart, bookies crash, the writer is
cut off and takes over again, and retention deletes everything committed past.

Default: WALKIT_SIM_RUNS / 8 (25) schedules; a failure prints its seed, and
``WALKIT_SIM_SEED=<seed> pytest tests/sim/test_consumers.py`` replays it.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests.sim._consumers import ConsumerScenario, run_consumer_scenario
from walkit.testing import SEED_ENV, run

RUNS = max(1, int(os.environ.get("WALKIT_SIM_RUNS", "200")) // 8)
REPLAY = os.environ.get(SEED_ENV, "").strip()

#: Seeds worth keeping (each once exposed a bug, or covers a rare path); always run.
REGRESSION_SEEDS: list[int] = []


def check(sc: ConsumerScenario) -> None:
    try:
        outcome = run(run_consumer_scenario, sc, seed=sc.seed, announce=False)
    except BaseException as exc:
        exc.add_note(sc.replay())
        raise
    failed = [r for r in outcome.results if not r.ok]
    assert not failed, "\n".join([sc.replay(), *map(str, outcome.results)])
    assert outcome.acked > 0, sc.replay()


@st.composite
def scenarios(draw: st.DrawFn) -> ConsumerScenario:
    return ConsumerScenario(
        bookies=draw(st.sampled_from((4, 3))),
        records=draw(st.integers(12, 59)),
        roll_entries=draw(st.integers(2, 6)),
        commit_every=draw(st.integers(1, 5)),
        restarts=draw(st.integers(0, 4)),
        faults=draw(st.integers(0, 6)),
        late=draw(st.integers(0, 1)),
        latency=draw(st.sampled_from((1, 0, 2))),
        rng_seed=draw(st.integers(0, 2**32 - 1)),
    )


@pytest.mark.skipif(bool(REPLAY), reason=f"replaying {SEED_ENV}={REPLAY}")
@pytest.mark.timeout(max(300, 6 * RUNS) + 360)
@settings(
    max_examples=RUNS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=False,
)
@given(scenarios())
def test_consumers_under_faults(sc: ConsumerScenario) -> None:
    """Nothing committed is delivered again after a restart; nothing uncommitted is lost to
    retention; every instance hands out records in order, each once."""
    note(sc.replay())
    check(sc)


@pytest.mark.parametrize("seed", [int(REPLAY, 0)] if REPLAY else REGRESSION_SEEDS or [7])
def test_replay_seed(seed: int) -> None:
    """One schedule by its seed (WALKIT_SIM_SEED, or the regression seeds)."""
    sc = ConsumerScenario.from_seed(seed)
    print(sc.replay())
    check(sc)


def test_seed_packs_every_field() -> None:
    sc = ConsumerScenario(4, 30, 3, 2, 4, 5, 1, 2, 123456789)
    assert ConsumerScenario.from_seed(sc.seed) == sc
    assert ConsumerScenario.from_seed(0) == ConsumerScenario(3, 12, 2, 1, 0, 0, 0, 0, 0)
