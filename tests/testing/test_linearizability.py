"""The linearizability checker: hand-written histories, a brute-force oracle, and Hypothesis."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walkit.testing import (
    KVOperation,
    LinearizabilityResult,
    check_kv_linearizable,
    check_linearizable,
)
from walkit.testing._linearizability import RegisterModel
from walkit.testing._wgl import Budget, search
from walkit.testing._wgl_lazy import search_lazy


def w(c: int, v: bytes, t0: float, t1: float | None, key: str = "k") -> KVOperation:
    return KVOperation(c, key, "write", v, t0, t1)


def r(c: int, v: bytes | None, t0: float, t1: float | None, key: str = "k") -> KVOperation:
    return KVOperation(c, key, "read", v, t0, t1)


def d(c: int, found: bool | None, t0: float, t1: float | None, key: str = "k") -> KVOperation:
    return KVOperation(c, key, "delete", None, t0, t1, found=found)


def cas(
    c: int,
    expected: bytes | None,
    v: bytes,
    found: bool | None,
    t0: float,
    t1: float | None,
    key: str = "k",
) -> KVOperation:
    return KVOperation(c, key, "cas", v, t0, t1, expected=expected, found=found)


def check(history: Sequence[KVOperation], **kw: Any) -> LinearizabilityResult:
    result = check_kv_linearizable(history, **kw)
    assert result.ok is not None, result  # hand-written histories are tiny: never undecided
    return result


# --- hand-written histories ----------------------------------------------------------------


def test_empty_history() -> None:
    result = check([])
    assert result.ok is True and bool(result) and result.key is None


def test_sequential_history() -> None:
    h = [
        r(1, None, 0, 1),
        w(1, b"a", 2, 3),
        r(2, b"a", 4, 5),
        cas(2, b"a", b"b", True, 6, 7),
        cas(1, b"a", b"c", False, 8, 9),
        r(1, b"b", 10, 11),
        d(2, True, 12, 13),
        d(1, False, 14, 15),
        r(2, None, 16, 17),
    ]
    assert check(h)


def test_stale_read_after_completed_write() -> None:
    h = [w(1, b"a", 0, 1), w(1, b"b", 2, 3), r(2, b"a", 4, 5)]
    result = check(h)
    assert result.ok is False and not result
    assert result.key == "k"
    assert "read -> b'a'" in result.explanation
    assert "a stale read" in result.explanation and "write b'b'" in result.explanation


@pytest.mark.parametrize(
    ("history", "reason"),
    [
        ([r(1, b"z", 0, 1)], "nothing wrote that value"),
        ([cas(1, None, b"a", False, 0, 1), r(2, b"a", 2, 3)], "was refused"),
        ([r(2, b"a", 0, 1), w(1, b"a", 2, 3)], "before its only write was sent"),
        ([w(1, b"a", 0, 1), d(2, True, 2, 3), r(3, b"a", 4, 5)], "a stale read"),
        ([w(1, b"a", 0, 1), cas(2, b"a", b"b", True, 2, 3), r(3, b"a", 4, 5)], "a stale read"),
        ([w(1, b"a", 0, 1), r(2, None, 2, 3)], "a lost write"),
        ([cas(1, None, b"a", True, 0, 1), r(2, None, 2, 3)], "a lost write"),
    ],
)
def test_plain_violations_are_explained_without_search(
    history: list[KVOperation], reason: str
) -> None:
    result = check_kv_linearizable(history, max_steps=1)
    assert result.ok is False and reason in result.explanation, result


def test_absent_read_of_a_key_that_always_had_a_value() -> None:
    result = check_kv_linearizable([r(1, None, 0, 1)], initial={"k": b"x"}, max_steps=1)
    assert result.ok is False and "from the start" in result.explanation
    # With a delete somewhere the search decides: here the delete may come first.
    assert check([d(2, True, 0, 2), r(1, None, 1, 3)], initial={"k": b"x"})


def test_overlapping_overwrite_is_not_a_stale_read() -> None:
    # The delete overlaps the write, or the read: not strictly between them, so only the
    # search decides. found=True puts it after the write, so the read is stale after all...
    result = check([w(1, b"a", 0, 2), d(2, True, 1, 3), r(3, b"a", 4, 5)])
    assert result.ok is False and "longest linearizable prefix" in result.explanation
    # ... while a delete of unknown outcome may have run before the write, or after the read.
    assert check([w(1, b"a", 0, 2), d(2, None, 1, 5), r(3, b"a", 4, 6)])
    assert check([w(1, b"a", 0, 1), d(2, None, 2, 5), r(3, b"a", 4, 6)])


def test_concurrent_read_may_see_either_value() -> None:
    # The read overlaps the second write: old or new value are both fine.
    for seen in (b"a", b"b"):
        assert check([w(1, b"a", 0, 1), w(1, b"b", 2, 5), r(2, seen, 3, 4)])
    # ... but not a value nobody wrote.
    assert not check([w(1, b"a", 0, 1), w(1, b"b", 2, 5), r(2, b"z", 3, 4)])


def test_reads_seeing_writes_in_opposite_orders() -> None:
    # Two concurrent writes; one reader sees a then b, the other b then a: no single order.
    h = [
        w(1, b"a", 0, 10),
        w(2, b"b", 0, 10),
        r(3, b"a", 1, 2),
        r(3, b"b", 3, 4),
        r(4, b"b", 1, 2),
        r(4, b"a", 3, 4),
    ]
    assert check(h).ok is False
    # One reader alone is fine, either way round.
    assert check(h[:4])
    assert check([*h[:2], *h[4:]])


def test_lost_acknowledged_write() -> None:
    # The write of b"b" was acknowledged, and later reads still see b"a".
    h = [w(1, b"a", 0, 1), w(2, b"b", 2, 3), r(3, b"a", 4, 5), r(3, b"a", 6, 7)]
    assert check(h).ok is False


def test_delete_that_found_an_absent_key() -> None:
    assert not check([d(1, True, 0, 1)])
    assert not check([w(1, b"a", 0, 1), d(1, True, 2, 3), d(2, True, 4, 5)])
    # found=False on an existing key is as wrong.
    assert not check([w(1, b"a", 0, 1), d(1, False, 2, 3)])
    # Concurrent deletes: exactly one may find it.
    assert check([w(1, b"a", 0, 1), d(1, True, 2, 5), d(2, False, 3, 4)])
    assert not check([w(1, b"a", 0, 1), d(1, True, 2, 5), d(2, True, 3, 4)])
    # Unknown found: only its effect counts.
    assert check([d(1, None, 0, 1), r(1, None, 2, 3)])


def test_cas() -> None:
    assert check([cas(1, None, b"a", True, 0, 1), r(1, b"a", 2, 3)])
    assert not check([w(1, b"x", 0, 1), cas(1, None, b"a", True, 2, 3)])
    assert not check([cas(1, None, b"a", False, 0, 1)])  # refused although the key was absent
    # Two concurrent cas from the same expected value: only one may win.
    assert check([cas(1, None, b"a", True, 0, 5), cas(2, None, b"b", False, 1, 4)])
    assert not check([cas(1, None, b"a", True, 0, 5), cas(2, None, b"b", True, 1, 4)])
    # A cas with unknown outcome applies when the state matches.
    assert check([w(1, b"x", 0, 1), cas(2, b"x", b"y", None, 2, 3), r(1, b"y", 4, 5)])
    assert not check([w(1, b"x", 0, 1), cas(2, b"x", b"y", None, 2, 3), r(1, b"x", 4, 5)])


def test_timed_out_write_later_read() -> None:
    # No answer, but a later read sees it: it took effect.
    h = [w(1, b"a", 0, 1), w(2, b"b", 2, None), r(3, b"b", 10, 11), r(3, b"b", 12, 13)]
    assert check(h)
    # Once seen, it cannot be undone by nothing: reading the old value again is a violation.
    assert not check([*h, r(3, b"a", 14, 15)])


def test_timed_out_write_never_read() -> None:
    h = [w(1, b"a", 0, 1), w(2, b"b", 2, None), r(3, b"a", 10, 11), r(3, b"a", 12, 13)]
    assert check(h)
    # It cannot take effect before it was sent.
    assert not check([r(3, b"b", 0, 1), w(2, b"b", 2, None)])


def test_unanswered_ops_constrain_nothing_but_their_effect() -> None:
    # A read without answer is ignored, whatever it claims.
    assert check([w(1, b"a", 0, 1), r(2, b"nonsense", 2, None)])
    # A delete without answer: found is ignored.
    assert check([d(1, True, 0, None), r(2, None, 5, 6)])
    assert check([w(1, b"a", 0, 1), d(1, False, 2, None), r(2, None, 5, 6)])


def test_overlapping_operations_are_fine() -> None:
    h = [
        w(1, b"a", 0, 3),
        r(2, None, 1, 2),
        r(3, b"a", 1, 4),
        w(2, b"b", 2.5, 6),
        r(4, b"b", 3.5, 5),
        r(1, b"b", 5.5, 7),
        d(3, True, 6.5, 8),
        r(2, None, 8.5, 9),
    ]
    assert check(h)


def test_touching_intervals_count_as_concurrent() -> None:
    # Read invoked at the very instant the write completed: both orders allowed.
    assert check([w(1, b"a", 0, 1), w(1, b"b", 1, 2), r(2, b"a", 2, 3)])


def test_unanswered_write_that_was_read_took_effect_before_the_read() -> None:
    # Only the unanswered write wrote b"b", so it happened before the read that returned it,
    # and therefore before the write of b"c" that began after that read's answer.
    h = [w(1, b"b", 0, None), r(2, b"b", 1, 2), w(3, b"c", 3, 4), r(2, b"c", 5, 6)]
    assert check(h)
    assert check([*h, r(2, b"b", 7, 8)]).ok is False


def test_many_unanswered_writes_and_deletes_stay_cheap() -> None:
    """40 unanswered ops nobody observed: 2**40 subsets, but two counts for the search."""
    h = [w(i, b"lost-%d" % i, i, None) for i in range(20)]
    h += [d(100 + i, None, i, None) for i in range(20)]
    h += [w(200, b"x", 30, 31), d(200, True, 32, 33), d(200, True, 34, 35), d(200, True, 36, 37)]
    assert check_kv_linearizable(h, max_steps=100_000).ok is True
    h += [cas(201, b"x", b"y", True, 38, 39)]  # b"x" was deleted and nothing wrote it again
    result = check_kv_linearizable(h, max_steps=100_000)
    assert result.ok is False, result
    assert "longest linearizable prefix" in result.explanation


def test_initial_values_and_keys_are_independent() -> None:
    h = [r(1, b"x0", 0, 1, key="x"), r(1, None, 0, 1, key="y"), w(2, b"y1", 2, 3, key="y")]
    assert check(h, initial={"x": b"x0"})
    assert not check(h)
    bad = check([*h, r(3, None, 4, 5, key="y")], initial={"x": b"x0"})
    assert bad.ok is False and bad.key == "y"
    assert "key 'y'" in bad.explanation and "key 'y'" in str(bad)


@pytest.mark.parametrize(
    "op",
    [
        KVOperation(1, "k", "write", None, 0, 1),
        KVOperation(1, "k", "cas", None, 0, 1, expected=b"a"),
        KVOperation(1, "k", "delete", b"x", 0, 1),
        KVOperation(1, "k", "read", None, 0, 1, expected=b"a"),
        KVOperation(1, "k", "write", b"a", 0, 1, found=True),
        KVOperation(1, "k", "read", None, 2, 1),
        KVOperation(1, "k", "append", b"a", 0, 1),  # type: ignore[arg-type]
    ],
)
def test_malformed_operations_are_refused(op: KVOperation) -> None:
    with pytest.raises(ValueError):
        check_kv_linearizable([op])


def test_bad_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="time_budget"):
        check_kv_linearizable([], time_budget=0)
    with pytest.raises(ValueError, match="max_steps"):
        check_kv_linearizable([], max_steps=-1)


def test_budget_exhausted_is_undecided() -> None:
    # Many concurrent unanswered writes and reads of each value: a big search.
    n = 14
    h = [w(i, b"v%d" % i, 0, None) for i in range(n)]
    h += [r(100, b"v%d" % i, 1 + i, 1.5 + i) for i in reversed(range(n))]
    result = check_kv_linearizable(h, max_steps=50)
    assert result.ok is None and not result and result.key == "k"
    assert "budget" in result.explanation
    assert check_kv_linearizable(h, time_budget=None).ok is True


def test_generic_core_with_another_model() -> None:
    """check_linearizable with a counter: increments and reads of the total."""

    @attrs.frozen
    class CounterOp:
        kind: str
        amount: int
        invoked: float
        completed: float | None

    class Counter:
        def init(self) -> int:
            return 0

        def step(self, state: int, op: CounterOp) -> tuple[bool, int]:
            if op.kind == "add":
                return True, state + op.amount
            return op.completed is None or op.amount == state, state

        def describe_operation(self, op: CounterOp) -> str:
            return f"{op.kind} {op.amount}"

        def describe_state(self, state: int) -> str:
            return str(state)

    good = [CounterOp("add", 1, 0, 2), CounterOp("add", 2, 0, 2), CounterOp("read", 2, 1, 1.5)]
    assert check_linearizable(good, Counter())
    bad = [*good, CounterOp("read", 1, 3, 4)]
    result = check_linearizable(bad, Counter())
    assert result.ok is False and result.key is None
    assert "then the state is 3" in result.explanation


# --- a brute-force oracle and Hypothesis -----------------------------------------------------


def brute_force(history: Sequence[KVOperation], initial: bytes | None = None) -> bool:
    """Every order of every subset (answered ops all in), respecting real time; one key."""

    def step(state: bytes | None, op: KVOperation) -> tuple[bool, bytes | None]:
        """The register, written out again (independent of the checker's model)."""
        known = op.completed is not None and op.found is not None
        if op.kind == "read":
            return op.value == state, state
        if op.kind == "write":
            return True, op.value
        if op.kind == "delete":
            return not known or op.found == (state is not None), None
        applies = state == op.expected
        return not known or op.found == applies, op.value if applies else state

    ops = [op for op in history if not (op.kind == "read" and op.completed is None)]
    answered = {i for i, op in enumerate(ops) if op.completed is not None}

    def extend(state: bytes | None, done: frozenset[int]) -> bool:
        if answered <= done:
            return True
        for i, op in enumerate(ops):
            if i in done:
                continue
            # op may go next unless an op not yet placed completed strictly before it began.
            if any(
                j not in done and j != i and (c := ops[j].completed) is not None and c < op.invoked
                for j in range(len(ops))
            ):
                continue
            legal, nxt = step(state, op)
            if legal and extend(nxt, done | {i}):
                return True
        return False

    return extend(initial, frozenset())


VALUES = [b"a", b"b", b"c"]


@st.composite
def random_histories(draw: st.DrawFn) -> list[KVOperation]:
    """Small arbitrary one-key histories (mostly not linearizable), coarse times with ties."""
    n = draw(st.integers(0, 7))
    ops = []
    for i in range(n):
        kind = draw(st.sampled_from(["read", "write", "delete", "cas"]))
        t0 = draw(st.integers(0, 8))
        t1 = draw(st.none() | st.integers(t0, 10))
        value = draw(st.sampled_from([None, *VALUES]))
        if kind == "read":
            ops.append(r(i, value, t0, t1))
        elif kind == "write":
            ops.append(w(i, value or b"a", t0, t1))
        elif kind == "delete":
            ops.append(d(i, draw(st.none() | st.booleans()), t0, t1))
        else:
            ops.append(
                cas(
                    i, value, draw(st.sampled_from(VALUES)), draw(st.none() | st.booleans()), t0, t1
                )
            )
    return ops


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_histories(), st.sampled_from([None, b"a"]))
def test_agrees_with_brute_force(history: list[KVOperation], initial: bytes | None) -> None:
    expected = brute_force(history, initial)
    result = check_kv_linearizable(history, initial={} if initial is None else {"k": initial})
    assert result.ok is expected, (history, result)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_histories(), st.sampled_from([None, b"a"]), st.booleans())
def test_both_search_orders_agree_with_brute_force(
    history: list[KVOperation], initial: bytes | None, shortcuts: bool
) -> None:
    """The greedy search and the one that tries unanswered ops last, alone (without the
    checks that run before them), with and without the shortcuts for unanswered ops."""
    ops = [op for op in history if not (op.kind == "read" and op.completed is None)]
    model = RegisterModel(initial, ops if shortcuts else ())
    if not shortcuts:
        model.observed = {v for op in ops for v in (op.value, op.expected)} | {None}
    classes = [model.interchangeable(op) for op in ops] if shortcuts else None
    deadlines = [model.deadline(op) for op in ops] if shortcuts else None
    expected = brute_force(history, initial)
    for search_fn in (search, search_lazy):
        ok, _ = search_fn(ops, model, Budget(None, None), classes, deadlines)
        assert ok is expected, (search_fn.__name__, history)


def sequential_history(rng: random.Random, n: int, keys: int) -> list[KVOperation]:
    """Run n random ops one at a time against a dict, then widen each op's interval around its
    linearization point at random (so ops overlap); some writes lose their answer, and some of
    those never took effect."""
    state: dict[str, bytes] = {}
    ops = []
    for i in range(n):
        key = f"k{rng.randrange(keys)}"
        kind = rng.choice(["read", "write", "write", "delete", "cas"])
        point = float(i)
        t0 = point - rng.uniform(0, 3)
        t1: float | None = point + rng.uniform(0, 3)
        client = i  # one op per client: the intervals of a client never overlap
        cur = state.get(key)
        if kind == "read":
            ops.append(KVOperation(client, key, "read", cur, t0, t1))
        elif kind == "write":
            value = b"v%d" % i
            if rng.random() < 0.15:
                t1 = None
                if rng.random() < 0.5:
                    ops.append(KVOperation(client, key, "write", value, t0, t1))
                    continue  # never took effect
            state[key] = value
            ops.append(KVOperation(client, key, "write", value, t0, t1))
        elif kind == "delete":
            state.pop(key, None)
            ops.append(KVOperation(client, key, "delete", None, t0, t1, found=cur is not None))
        else:
            expected = cur if rng.random() < 0.6 else rng.choice([None, b"v%d" % rng.randrange(n)])
            value = b"v%d" % i
            ok = expected == cur
            if ok:
                state[key] = value
            ops.append(KVOperation(client, key, "cas", value, t0, t1, expected=expected, found=ok))
    rng.shuffle(ops)
    return ops


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 60), st.integers(1, 4))
def test_histories_from_a_sequential_run_are_linearizable(seed: int, n: int, keys: int) -> None:
    history = sequential_history(random.Random(seed), n, keys)
    result = check_kv_linearizable(history, time_budget=None)
    assert result.ok is True, result


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.integers(2, 40), st.integers(1, 3))
def test_a_read_of_a_value_never_written_fails(seed: int, n: int, keys: int) -> None:
    rng = random.Random(seed)
    history = sequential_history(rng, n, keys)
    reads = [i for i, op in enumerate(history) if op.kind == "read"]
    if not reads:
        return
    i = rng.choice(reads)
    history[i] = attrs.evolve(history[i], value=b"never written")
    result = check_kv_linearizable(history, time_budget=None)
    assert result.ok is False and result.key == history[i].key, result
    assert "never written" in result.explanation


def test_mutated_reads_fail_as_the_oracle_says() -> None:
    """Swap one read's value for another written value: small histories, checked against the
    brute-force oracle, and a good share of them are caught."""
    failures = 0
    for seed in range(300):
        rng = random.Random(seed)
        history = sequential_history(rng, 7, 1)
        reads = [i for i, op in enumerate(history) if op.kind == "read"]
        if not reads:
            continue
        i = rng.choice(reads)
        written = [op.value for op in history if op.kind in ("write", "cas")]
        history[i] = attrs.evolve(history[i], value=rng.choice([None, *written]))
        expected = brute_force(history)
        assert check_kv_linearizable(history).ok is expected, (seed, history)
        failures += not expected
    assert failures >= 20, failures


def test_explanation_names_the_longest_prefix() -> None:
    # Two readers see two concurrent writes in opposite orders.
    h = [
        w(1, b"a", 0, 10),
        w(2, b"b", 0, 10),
        r(3, b"a", 1, 2),
        r(3, b"b", 3, 4),
        r(4, b"b", 1, 2),
        r(4, b"a", 3, 4),
    ]
    result = check(h)
    assert result.ok is False
    text = result.explanation
    assert "longest linearizable prefix has 5" in text, text
    assert text.index("write b'a'") < text.index("must take effect")


def test_many_keys_and_ops_in_one_check() -> None:
    history = sequential_history(random.Random(11), 3000, 50)
    assert check_kv_linearizable(history, time_budget=None)
