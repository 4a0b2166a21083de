"""A bookie's ``/livez`` and ``/readyz``, on real bookie processes, healthy and failing for
real: a journal disk that fills up, a ledger disk that stops finishing writes (``fsfreeze``,
so the journal stalls waiting for room in the write cache), a journal disk that stops (the
event loop blocks in a write, and no probe is answered), and ZooKeeper stopped under a bookie.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import trio

from tests._zookeeper import missing_zookeeper, running_zookeeper
from tests.bookie._helpers import connect, packet, payload_for
from tests.ops._ops import (
    AdminBookie,
    Probe,
    freezable_disk,
    frozen,
    probe,
    small_tmpfs,
    wait_for,
    wait_for_line,
)
from walkit._core.wire import AddResponse, ReadResponse, StatusCode

pytestmark = pytest.mark.processes


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'metadata.db'}"


def _failing(address: tuple[str, int], path: str, check: str) -> Probe | None:
    """The probe's answer if it is a 503 naming ``check`` among its reasons, else None."""
    answer = probe(address, path)
    if answer.status == 503 and any(r.startswith(f"{check}:") for r in answer.body["reasons"]):
        return answer
    return None


def _passing(address: tuple[str, int], path: str) -> Probe | None:
    answer = probe(address, path)
    return answer if answer.status == 200 else None


def test_a_healthy_bookie_is_live_and_ready_and_bad_probes_get_400(tmp_path: Path) -> None:
    bookie = AdminBookie(_sqlite(tmp_path), tmp_path / "bookie")
    bookie.start()
    try:
        live = probe(bookie.admin, "/livez")
        assert live.status == 200, live
        assert live.body["status"] == "ok" and live.body["bookie_id"] == str(bookie.address)
        assert set(live.body["checks"]) == {"event_loop", "journal"}
        ready = probe(bookie.admin, "/readyz")
        assert ready.status == 200, ready
        assert {name: c["ok"] for name, c in ready.body["checks"].items()} == {
            "metadata": True,
            "registered": True,
            "writable": True,
            "journal": True,
        }
        assert "reasons" not in ready.body
        assert "registered as writable at /bookies/available/" in str(ready.body)
        assert probe(bookie.admin, "/health").body["status"] == "ok"  # the old one goes on
        for bad in ("journal_stall=0", "journal_stall=x", "journal_stall=1&journal_stall=2"):
            answer = probe(bookie.admin, f"/readyz?{bad}")
            assert answer.status == 400 and "journal_stall" in answer.body["text"], answer
        assert probe(bookie.admin, "/livez?verbose=1").status == 400
        assert probe(bookie.admin, "/readyz").status == 200  # and it goes on
    finally:
        bookie.stop()


def _fill(directory: Path) -> Path:
    """Write a file in ``directory`` until its file system is full; the file."""
    filler = directory / "filler"
    chunk = b"\0" * (256 << 10)
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


async def test_a_full_journal_disk_makes_the_bookie_not_ready_until_a_write_succeeds(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "small", "8m") as small:
        bookie = AdminBookie(
            _sqlite(tmp_path),
            small / "journal",
            data_dirs=[tmp_path / "ledgers"],
            extra_args=["--disk-usage-threshold", "1.0", "--disk-check-interval", "0.2"],
        )
        bookie.start()
        try:
            async with connect(bookie.address) as c:
                assert (await c.add(1, 0, b"before")).status is StatusCode.OK
                assert probe(bookie.admin, "/readyz").status == 200
                filler = _fill(small)
                mark = len(bookie.output)
                status = StatusCode.OK
                entry = 1
                while status is StatusCode.OK:  # into the preallocated journal, then ENOSPC
                    status = (await c.add(1, entry, payload_for(1, entry, 64 << 10))).status
                    entry += 1
                assert status is StatusCode.BOOKIE_READ_ONLY, status
                wait_for_line(bookie, "journal_commit_failed", after=mark)
                answer = probe(bookie.admin, "/readyz")
                assert answer.status == 503, answer
                assert answer.body["checks"]["writable"]["ok"] is False
                assert "disk_full" in answer.body["checks"]["writable"]["detail"]
                assert "No space left" in answer.body["checks"]["journal"]["detail"]
                # Not live's business: the bookie serves reads and answers.
                assert probe(bookie.admin, "/livez").status == 200

                mark = len(bookie.output)
                filler.unlink()
                wait_for_line(bookie, "bookie_writable", after=mark)
                answer = probe(bookie.admin, "/readyz")  # writable, but the journal's last
                assert answer.status == 503, answer  # write failed: not ready yet
                assert [r.split(":")[0] for r in answer.body["reasons"]] == ["journal"]
                assert (await c.add(2, 0, b"after")).status is StatusCode.OK
                answer = probe(bookie.admin, "/readyz")
                assert answer.status == 200, answer
                read = await c.read(1, 0)
                assert isinstance(read, ReadResponse) and read.packet == packet(1, 0, b"before")
        finally:
            bookie.stop()


async def test_a_stalled_journal_makes_the_bookie_not_ready_then_not_live(tmp_path: Path) -> None:
    """The ledger disk stops finishing writes (frozen): the checkpoint cannot write the write
    cache out, the cache fills up, and journal writes wait for room: the journal stalls while
    the event loop serves. Thawed, every add is answered and reads back."""
    with freezable_disk(tmp_path / "ledgers") as ledgers:
        bookie = AdminBookie(
            _sqlite(tmp_path),
            tmp_path / "journal",
            data_dirs=[ledgers / "data"],
            extra_args=["--write-cache-size", "256KiB", "--checkpoint-interval", "3600"],
        )
        bookie.start()
        try:
            async with connect(bookie.address) as c, trio.open_nursery() as nursery:
                assert (await c.add(1, 0, b"first")).status is StatusCode.OK
                answers: list[AddResponse] = []

                async def flood() -> None:
                    # 2 MiB in groups of 128 KiB, each sent once the one before is answered:
                    # a group is checked against the write cache's room before it is written.
                    for first in range(1, 129, 8):
                        adds = [
                            c.add_request(1, e, payload_for(1, e, 16 << 10))
                            for e in range(first, first + 8)
                        ]
                        answers.extend(await c.call_many(adds))  # type: ignore[arg-type]  # adds get AddResponses

                with frozen(ledgers):
                    nursery.start_soon(flood)
                    stalled = await trio.to_thread.run_sync(
                        wait_for,
                        lambda: _failing(bookie.admin, "/readyz", "journal"),
                        60,
                        "readyz to report the stalled journal",
                    )
                    assert "waited" in stalled.reasons and "write cache" in stalled.reasons
                    assert stalled.body["checks"]["metadata"]["ok"] is True
                    live = probe(bookie.admin, "/livez")  # stalled for seconds, not a minute
                    assert live.status == 200, live
                    live = probe(bookie.admin, "/livez?journal_stall=1")
                    assert live.status == 503 and "journal: a record has waited" in live.reasons
                    assert len(answers) < 128  # the flood waits for the frozen disk
                with trio.fail_after(60):
                    while len(answers) < 128:  # noqa: ASYNC110 (the flood's answers, thawed)
                        await trio.sleep(0.05)
                assert [a.status for a in answers] == [StatusCode.OK] * 128
                await trio.to_thread.run_sync(
                    wait_for, lambda: _passing(bookie.admin, "/readyz"), 30, "ready again"
                )
                for e in (0, 64, 128):
                    read = await c.read(1, e)
                    assert isinstance(read, ReadResponse) and read.status is StatusCode.OK
                    assert read.packet == packet(
                        1, e, b"first" if e == 0 else payload_for(1, e, 16 << 10)
                    )
        finally:
            bookie.stop()


async def test_a_bookie_blocked_in_a_journal_write_answers_no_probe(tmp_path: Path) -> None:
    """Small journal writes are made on the event loop (cheaper than a thread hand-off): when
    the journal's disk stops, the whole bookie stops answering, probes included. An
    orchestrator's probe timeout is the verdict then, as for a paused process."""
    with freezable_disk(tmp_path / "journal") as journal:
        bookie = AdminBookie(_sqlite(tmp_path), journal / "data", data_dirs=[tmp_path / "ledgers"])
        bookie.start()
        try:
            async with connect(bookie.address) as c, trio.open_nursery() as nursery:
                assert (await c.add(1, 0, b"first")).status is StatusCode.OK
                answered: list[AddResponse] = []

                async def add() -> None:
                    answered.append(await c.add(1, 1, b"second"))

                with frozen(journal):
                    nursery.start_soon(add)
                    silent = await trio.to_thread.run_sync(
                        wait_for,
                        lambda: (
                            (p := probe(bookie.admin, "/livez", timeout=1)).status is None and p
                        ),
                        30,
                        "livez to go unanswered",
                    )
                    assert "timed out" in silent.body["error"], silent
                    assert probe(bookie.admin, "/readyz", timeout=1).status is None
                    assert not answered
                with trio.fail_after(30):
                    while not answered:  # noqa: ASYNC110 (the add's answer, once thawed)
                        await trio.sleep(0.05)
                assert answered[0].status is StatusCode.OK
                assert probe(bookie.admin, "/livez").status == 200
        finally:
            bookie.stop()


@pytest.mark.zookeeper
def test_readyz_says_why_while_zookeeper_is_down(tmp_path: Path) -> None:
    problem = missing_zookeeper()
    if problem:
        pytest.fail(problem, pytrace=False)
    with running_zookeeper(tmp_path / "zookeeper") as zookeeper:
        bookie = AdminBookie(zookeeper.url("/health"), tmp_path / "bookie")
        bookie.start()
        try:
            assert probe(bookie.admin, "/readyz").status == 200
            zookeeper.stop()
            down = wait_for(
                lambda: _failing(bookie.admin, "/readyz", "metadata"),
                30,
                "readyz to report the metadata session down",
            )
            assert "metadata store" in down.reasons, down
            print(f"readyz with ZooKeeper down: {down.reasons}")
            assert probe(bookie.admin, "/livez").status == 200
            zookeeper.restart()  # same port and data
            wait_for(lambda: _passing(bookie.admin, "/readyz"), 60, "ready again")
        finally:
            bookie.stop()
