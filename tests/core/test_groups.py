"""walkit._groups: one error out of a nursery's group, the others kept as notes."""

from __future__ import annotations

import asyncio

import pytest
import trio

from walkit._groups import collapse, leaves
from walkit.errors import BookieIOError, NotEnoughBookiesError


async def _group_of(*errors: BaseException) -> BaseExceptionGroup[BaseException]:
    """The group a real nursery raises when its tasks fail with ``errors``."""

    async def fail(exc: BaseException) -> None:
        raise exc

    try:
        async with trio.open_nursery() as nursery:
            for exc in errors:
                nursery.start_soon(fail, exc)
    except BaseExceptionGroup as group:
        return group
    raise AssertionError("the nursery raised nothing")


async def test_the_first_walkit_error_wins_and_the_others_become_notes() -> None:
    value, io = ValueError("bad"), BookieIOError("disk gone")
    group = BaseExceptionGroup("outer", [value, BaseExceptionGroup("inner", [io, KeyError("k")])])
    inner = group.exceptions[1]
    assert isinstance(inner, BaseExceptionGroup)
    assert leaves(group) == [value, io, inner.exceptions[1]]
    chosen = collapse(group)
    assert chosen is io
    assert io.__notes__ == ["also raised: ValueError: bad", "also raised: KeyError: 'k'"]
    assert collapse(group) is io and len(io.__notes__) == 2  # collapsing again adds nothing


async def test_without_a_walkit_error_the_first_error_wins() -> None:
    group = await _group_of(RuntimeError("first"))
    chosen = collapse(group)
    assert isinstance(chosen, RuntimeError) and not getattr(chosen, "__notes__", None)


async def test_cancellations_are_dropped_unless_alone() -> None:
    error = NotEnoughBookiesError("two of three")
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                raise error
        except BaseExceptionGroup as group:
            assert collapse(group) is error
            assert not getattr(error, "__notes__", None)  # the Cancelled is no secondary error
    cancelled: list[BaseException] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                await trio.sleep_forever()
        except BaseExceptionGroup as group:
            cancelled.append(collapse(group))
            raise cancelled[0] from None
    assert len(cancelled) == 1 and isinstance(cancelled[0], trio.Cancelled)


def test_asyncio_cancellations_are_dropped_unless_alone() -> None:
    # Sorted without a running loop, as after a task group has ended (uvloop raises the same).
    error, cancelled = NotEnoughBookiesError("two of three"), asyncio.CancelledError()
    assert collapse(BaseExceptionGroup("g", [cancelled, error])) is error
    assert not getattr(error, "__notes__", None)
    assert collapse(BaseExceptionGroup("g", [cancelled])) is cancelled


def test_a_nested_group_gives_its_one_error() -> None:
    group = BaseExceptionGroup("x", [BaseExceptionGroup("y", [ValueError()])])
    assert isinstance(collapse(group), ValueError)
    with pytest.raises(ValueError):
        raise collapse(group) from None
