"""SimNetwork: each fault, on trio's MockClock."""

from __future__ import annotations

import errno

import anyio
import pytest
import trio
import trio.testing

from walkit import BookieId
from walkit.errors import BookieUnavailableError, InvalidArgumentError
from walkit.testing import SimNetwork


class Echo:
    """A server that echoes what it receives and remembers its streams."""

    def __init__(self) -> None:
        self.streams: list[trio.abc.Stream] = []
        self.errors: list[BaseException] = []

    async def __call__(self, stream: trio.abc.Stream) -> None:
        self.streams.append(stream)
        try:
            while data := await stream.receive_some():
                await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self.errors.append(exc)


@pytest.fixture
def net() -> SimNetwork:
    return SimNetwork(seed=1)


async def serve(nursery: trio.Nursery, net: SimNetwork, node: str, handler: Echo) -> BookieId:
    address: BookieId = await nursery.start(net.node(node).serve, node, 0, handler)
    return address


async def test_echo_and_eof(net: SimNetwork, autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        echo = Echo()
        address = await serve(nursery, net, "b1", echo)
        assert address == BookieId("b1", 3181)
        stream = await net.node("c").connect(address)
        await stream.send(b"hello")
        assert await stream.receive() == b"hello"
        await stream.send(b"abcdef")
        assert await stream.receive(2) == b"ab"
        assert await stream.receive() == b"cdef"
        await stream.aclose()
        with pytest.raises(anyio.ClosedResourceError):
            await stream.send(b"x")
        await trio.testing.wait_all_tasks_blocked()
        assert net.connection_count() == 0
        nursery.cancel_scope.cancel()


async def test_delay_and_jitter_keep_order(
    net: SimNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        received: list[tuple[float, bytes]] = []

        async def sink(stream: trio.abc.Stream) -> None:
            while data := await stream.receive_some():
                received.append((trio.current_time(), bytes(data)))

        address = await nursery.start(net.node("b").serve, "b", 0, sink)
        net.set_delay(1.0, jitter=0.5, src="c", dst="b")
        stream = await net.node("c").connect(address)
        start = trio.current_time()
        for i in range(20):
            await stream.send(b"%02d" % i)
        await trio.sleep(10)
        assert b"".join(d for _, d in received) == b"".join(b"%02d" % i for i in range(20))
        times = [t - start for t, _ in received]
        assert all(1.0 <= t <= 1.5 for t in times), times
        assert times == sorted(times)
        assert len(set(times)) > 1  # jitter did vary the delays
        # The other direction has no delay.
        assert net.link("b", "c").delay == 0.0
        nursery.cancel_scope.cancel()


async def test_connect_costs_a_round_trip(
    net: SimNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        address = await serve(nursery, net, "b", Echo())
        net.set_delay(0.25)
        start = trio.current_time()
        stream = await net.node("c").connect(address)
        assert trio.current_time() - start == pytest.approx(0.5)
        await stream.send(b"x")
        assert await stream.receive() == b"x"
        assert trio.current_time() - start == pytest.approx(1.0)
        nursery.cancel_scope.cancel()


async def test_stall_holds_data_until_heal(
    net: SimNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        address = await serve(nursery, net, "b", Echo())
        stream = await net.node("c").connect(address)
        net.stall("b", "c")  # replies are held; requests still go through
        await stream.send(b"ping")
        with trio.move_on_after(100):
            await stream.receive()
            pytest.fail("a stalled link delivered data")
        assert net.holds("b", "c") and not net.holds("c", "b")
        net.stall("c", "b")
        net.unstall("b", "c")  # one direction only
        assert net.holds("c", "b") and not net.holds("b", "c")
        net.heal()
        assert await stream.receive() == b"ping"
        nursery.cancel_scope.cancel()


async def test_pause_holds_both_directions(
    net: SimNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        address = await serve(nursery, net, "b", Echo())
        stream = await net.node("c").connect(address)
        net.pause("b")
        await stream.send(b"ping")
        with trio.move_on_after(100) as scope:
            await stream.receive()
        assert scope.cancelled_caught
        net.resume("b")
        assert await stream.receive() == b"ping"
        nursery.cancel_scope.cancel()


async def test_reset_breaks_both_ends(
    net: SimNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        echo = Echo()
        address = await serve(nursery, net, "b", echo)
        stream = await net.node("c").connect(address)
        other = await net.node("d").connect(address)
        await stream.send(b"x")
        assert await stream.receive() == b"x"
        assert net.reset("c", "b") == 1
        with pytest.raises(anyio.BrokenResourceError):
            await stream.receive()
        with pytest.raises(anyio.BrokenResourceError):
            await stream.send(b"y")
        await trio.testing.wait_all_tasks_blocked()
        assert len(echo.errors) == 1 and isinstance(echo.errors[0], trio.BrokenResourceError)
        # The connection from d is untouched.
        await other.send(b"z")
        assert await other.receive() == b"z"
        nursery.cancel_scope.cancel()


async def test_random_resets(net: SimNetwork, autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        address = await serve(nursery, net, "b", Echo())
        net.set_reset_probability(1.0, src="c", dst="b")
        stream = await net.node("c").connect(address)
        with pytest.raises(anyio.BrokenResourceError):
            await stream.send(b"x")
        net.set_reset_probability(0.5, src="c", dst="b")
        outcomes = []
        for _ in range(40):
            stream = await net.node("c").connect(address)
            try:
                await stream.send(b"x")
                outcomes.append(await stream.receive() == b"x")
            except anyio.BrokenResourceError:
                outcomes.append(False)
        assert 5 < sum(outcomes) < 35
        nursery.cancel_scope.cancel()


async def test_refused_connects(net: SimNetwork, autojump_clock: trio.testing.MockClock) -> None:
    with pytest.raises(BookieUnavailableError, match="refused"):
        await net.connect(BookieId("nobody", 3181))
    async with trio.open_nursery() as nursery:
        address = await serve(nursery, net, "b", Echo())
        net.refuse("c", "b")
        with pytest.raises(BookieUnavailableError, match="refused"):
            await net.node("c").connect(address)
        await net.node("d").connect(address)  # others still connect
        net.heal("c", "b")
        await net.node("c").connect(address)
        net.set_refuse_probability(0.5)
        refused = 0
        for _ in range(40):
            try:
                await net.node("c").connect(address)
            except BookieUnavailableError:
                refused += 1
        assert 5 < refused < 35
        nursery.cancel_scope.cancel()


async def test_partition_times_out_connects_and_holds_data(
    net: SimNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        a1 = await serve(nursery, net, "b1", Echo())
        a2 = await serve(nursery, net, "b2", Echo())
        s1 = await net.node("c").connect(a1)
        net.partition(["c", "x"], ["b1"])
        start = trio.current_time()
        with pytest.raises(BookieUnavailableError, match="timed out"):
            await net.node("c").connect(a1)
        assert trio.current_time() - start == pytest.approx(net.connect_timeout)
        await net.node("c").connect(a2)  # b2 is on no side
        await s1.send(b"held")
        with trio.move_on_after(60) as scope:
            await s1.receive()
        assert scope.cancelled_caught
        # A connect waiting for the partition goes through when it heals.
        async with trio.open_nursery() as inner:
            inner.start_soon(net.node("c").connect, a1)
            await trio.sleep(1)
            net.heal("c", "b1")
        assert await s1.receive() == b"held"
        nursery.cancel_scope.cancel()


async def test_partition_with_reset_and_isolate(
    net: SimNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        a1 = await serve(nursery, net, "b1", Echo())
        a2 = await serve(nursery, net, "b2", Echo())
        s1 = await net.node("c").connect(a1)
        s2 = await net.node("c").connect(a2)
        net.partition("c", "b1", reset=True)
        with pytest.raises(anyio.BrokenResourceError):
            await s1.receive()
        await s2.send(b"ok")
        assert await s2.receive() == b"ok"
        net.heal()
        net.isolate("b2", reset=True)
        with pytest.raises(anyio.BrokenResourceError):
            await s2.send(b"x")
        with pytest.raises(BookieUnavailableError):
            await net.node("someone-new").connect(a2)
        await net.node("c").connect(a1)
        net.heal("b2")
        await net.node("c").connect(a2)
        nursery.cancel_scope.cancel()


async def test_stopping_a_server_resets_its_connections(
    net: SimNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        server_scope = trio.CancelScope()

        async def server(task_status: trio.TaskStatus[BookieId]) -> None:
            with server_scope:
                await net.node("b").serve("b", 0, Echo(), task_status=task_status)

        address = await nursery.start(server)
        stream = await net.node("c").connect(address)
        server_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(anyio.BrokenResourceError):
            await stream.receive()
        assert net.listening == []
        with pytest.raises(BookieUnavailableError, match="refused"):
            await net.node("c").connect(address)
        # The same address can be served again (a restart).
        again = await nursery.start(net.node("b").serve, "b", address.port, Echo())
        assert again == address
        with pytest.raises(OSError) as info:
            await nursery.start(net.node("b").serve, "b", address.port, Echo())
        assert info.value.errno == errno.EADDRINUSE
        nursery.cancel_scope.cancel()


async def test_bad_arguments(net: SimNetwork, autojump_clock: trio.testing.MockClock) -> None:
    with pytest.raises(InvalidArgumentError):
        net.set_delay(-1)
    with pytest.raises(InvalidArgumentError):
        net.set_reset_probability(2)
    with pytest.raises(InvalidArgumentError):
        net.partition(["a", "b"], ["b"])
    with pytest.raises(InvalidArgumentError):
        net.node("")
    with pytest.raises(InvalidArgumentError):
        await net.connect("b:3181")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        SimNetwork(seed=1, rng=__import__("random").Random(1))


def _delivery_times(seed: int) -> list[float]:
    async def main() -> list[float]:
        net = SimNetwork(seed=seed)
        net.set_delay(0.01, jitter=0.02)
        times: list[float] = []

        async def sink(stream: trio.abc.Stream) -> None:
            while await stream.receive_some():
                times.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            address = await nursery.start(net.serve, "b", 0, sink)
            for _ in range(3):
                stream = await net.connect(address)
                for _ in range(5):
                    await stream.send(b"x")
                    await trio.sleep(0.001)
            await trio.sleep(1)
            nursery.cancel_scope.cancel()
        return times

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_same_seed_same_run() -> None:
    assert _delivery_times(7) == _delivery_times(7)
    assert _delivery_times(7) != _delivery_times(8)
