"""Randomized fault schedules over (E, Qw, Qa) up to E=5, checked by every checker.

Default: WALKIT_SIM_RUNS (200) schedules per test. A failure prints its seed (after Hypothesis
shrank it); ``WALKIT_SIM_SEED=<seed> pytest tests/sim`` replays exactly that schedule.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tests.sim._scenario import Scenario, check_scenario
from walkit.testing import SEED_ENV

RUNS = int(os.environ.get("WALKIT_SIM_RUNS", "200"))
REPLAY = os.environ.get(SEED_ENV, "").strip()

#: Seeds worth keeping (each once exposed a bug, or covers a rare path); always run.
REGRESSION_SEEDS: list[int] = [
    # The writer flipped its ensemble between two bookies that both answered IO_ERROR, a
    # metadata CAS each time, without pausing (fixed in 575e5be).
    14563139416777314,
    41186071000,
    50416216711936769,
    71075950825079156,
    2222926648676537,
    # A single bookie stays read-only until its next disk check: recovery must wait for it.
    81407657607183750,
]

SETTINGS = settings(
    max_examples=RUNS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=False,
)

skip_when_replaying = pytest.mark.skipif(bool(REPLAY), reason=f"replaying {SEED_ENV}={REPLAY}")
#: The suite's 300 s per-test limit is for passing runs; big runs get ~1 s a schedule, and a
#: failure gets the time Hypothesis may spend shrinking it (it stops after 300 s).
budget = pytest.mark.timeout(max(300, RUNS) + 360)


@st.composite
def scenarios(draw: st.DrawFn, *, recovery: bool) -> Scenario:
    # Hypothesis favours small values; these ranges keep most schedules busy while still
    # shrinking towards fewer entries and faults (and towards E=3).
    ensemble = draw(st.sampled_from((3, 4, 5, 2, 1)))
    write_quorum = draw(st.integers(1, ensemble))
    ack_quorum = draw(st.integers(1, write_quorum))
    return Scenario(
        ensemble=ensemble,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        spare=draw(st.integers(0, 2)),
        entries=draw(st.integers(8, 64)),
        appenders=draw(st.integers(1, 4)),
        faults=draw(st.integers(1, 12)),
        recovery=draw(st.integers(1, 2)) if recovery else 0,
        latency=draw(st.sampled_from((1, 2, 0, 3))),
        mode=draw(st.integers(0, 1)),
        rng_seed=draw(st.integers(0, 2**32 - 1)),
    )


@skip_when_replaying
@budget
@SETTINGS
@given(scenarios(recovery=False))
def test_writes_ensemble_changes_and_reads(sc: Scenario) -> None:
    """Crashes, partitions, delays, stalls, pauses and resets while one writer appends and a
    reader tails; then everything heals, the writer closes, and the ledger is read back."""
    note(sc.replay())
    check_scenario(sc)


@skip_when_replaying
@budget
@SETTINGS
@given(scenarios(recovery=True))
def test_recovery_fences_a_live_writer(sc: Scenario) -> None:
    """The same faults (also between the recovering clients and bookies), and one or two more
    clients open the ledger with recovery while the first keeps writing: the writer is fenced,
    nothing it was told is lost, and every recovery ends the ledger at the same entry."""
    note(sc.replay())
    check_scenario(sc)


@pytest.mark.parametrize("seed", [int(REPLAY, 0)] if REPLAY else REGRESSION_SEEDS or [0])
def test_replay_seed(seed: int) -> None:
    """One schedule by its seed (WALKIT_SIM_SEED, or the regression seeds)."""
    sc = Scenario.from_seed(seed)
    print(sc.replay())
    check_scenario(sc)


def test_seed_packs_every_field() -> None:
    sc = Scenario(4, 3, 2, 1, 17, 3, 5, 2, 3, 1, 123456789)
    assert Scenario.from_seed(sc.seed) == sc
    assert Scenario.from_seed(0) == Scenario(1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0)
    # Any integer is a valid scenario (quorums are clamped into E >= Qw >= Qa).
    for seed in (1, 7, 10**6, 2**70):
        s = Scenario.from_seed(seed)
        assert s.ensemble >= s.write_quorum >= s.ack_quorum >= 1
