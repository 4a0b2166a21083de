"""walkit.sync's own promises: fork, interpreter exit, KeyboardInterrupt, waits that end,
its election, and calls that would wait for themselves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import walkit
import walkit.sync
from tests._cluster import ProcessCluster, process_cluster

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("sync")
    with process_cluster(f"sqlite:///{root / 'metadata.db'}", root, 3) as c:
        yield c


def _python(source: str, url: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source), url],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_a_client_used_after_fork_says_so(cluster: ProcessCluster) -> None:
    with walkit.sync.Client.connect(cluster.metadata_url) as client:
        client.list_ledgers()
        pid = os.fork()
        if pid == 0:  # the child: its copy of the client has no loop thread behind it
            try:
                client.list_ledgers()
            except walkit.ForkedProcessError:
                os._exit(0)
            except BaseException:
                os._exit(2)
            os._exit(1)
        _pid, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert isinstance(client.list_ledgers(), list)  # the parent's is fine


def test_a_client_never_closed_does_not_hang_the_exit(cluster: ProcessCluster) -> None:
    done = _python(
        """
        import sys, threading, walkit.sync
        client = walkit.sync.Client.connect(sys.argv[1])
        log = walkit.sync.Log.open(client, "never-closed")
        writer = log.writer()
        appending = threading.Thread(target=lambda: [writer.append(b"x") for _ in range(100)])
        appending.start()
        appending.join()
        print("appended", flush=True)
        """,
        cluster.metadata_url,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "appended"


def test_keyboard_interrupt_cancels_the_call_and_the_client_goes_on(
    cluster: ProcessCluster,
) -> None:
    done = _python(
        """
        import os, signal, sys, threading, time, walkit, walkit.sync

        # Ctrl-C raises KeyboardInterrupt, as in a program started from a terminal (a test
        # runner started in the background by a shell inherits SIGINT ignored).
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def interrupt_when_waiting(main):
            # SIGINT once the main thread waits for the loop (walkit.sync's wait(), inside
            # reader.next()), not at a moment a loaded machine may reach before that.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                frame = sys._current_frames().get(main)
                while frame is not None:
                    code = frame.f_code
                    if code.co_name == "wait" and code.co_filename.endswith("_thread.py"):
                        os.kill(os.getpid(), signal.SIGINT)
                        return
                    frame = frame.f_back
                time.sleep(0.01)

        with walkit.sync.Client.connect(sys.argv[1]) as client:
            with walkit.sync.Log.open(client, "interrupted") as log:
                reader = log.reader()  # follows: waits for records that never come
                threading.Thread(
                    target=interrupt_when_waiting, args=(threading.get_ident(),)
                ).start()
                try:
                    reader.next()
                except KeyboardInterrupt:
                    print("interrupted", flush=True)
                with log.writer() as writer:
                    pos = writer.append(b"after")
                assert [r.position for r in log.reader(follow=False)] == [pos]
                print("usable", flush=True)
        """,
        cluster.metadata_url,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["interrupted", "usable"]


def test_a_timeout_ends_iteration_and_it_can_go_on(cluster: ProcessCluster) -> None:
    with (
        walkit.sync.Client.connect(cluster.metadata_url) as client,
        walkit.sync.Log.open(client, "timeouts") as log,
        log.writer() as writer,
    ):
        reader = log.reader(timeout=0.2)
        assert list(reader) == []
        first = writer.append_batch([b"a", b"b"])
        assert [r.position for r in reader] == first
        assert reader.next(timeout=0.1) is None
        writer.append(b"c")
        assert [r.payload for r in reader] == [b"c"]


def test_a_call_from_the_loop_thread_is_refused(cluster: ProcessCluster) -> None:
    with walkit.sync.Client.connect(cluster.metadata_url) as client:
        with pytest.raises(walkit.WrongEventLoopError, match="wait for itself"):
            client.thread.run_sync(client.list_ledgers)
        assert isinstance(client.list_ledgers(), list)


def test_a_closed_client_says_so(cluster: ProcessCluster) -> None:
    client = walkit.sync.Client.connect(cluster.metadata_url)
    client.close()
    client.close()  # idempotent
    with pytest.raises(walkit.ClientClosedError):
        client.list_ledgers()


def test_the_ledger_api(cluster: ProcessCluster) -> None:
    with walkit.sync.Client.connect(cluster.metadata_url) as client:
        with client.create_ledger(3, 2, 2, password=b"pw") as ledger:
            ids = [ledger.append(b"e0"), *ledger.append_batch([b"e1", b"e2"])]
        assert ids == [0, 1, 2]
        reader = client.open_ledger(ledger.id, password=b"pw")
        assert reader.is_closed and reader.last_add_confirmed == 2
        assert [e.payload for e in reader.read(0, 2)] == [b"e0", b"e1", b"e2"]
        with pytest.raises(walkit.UnauthorizedAccessError):
            client.open_ledger(ledger.id, password=b"wrong")
        client.delete_ledger(ledger.id, password=b"pw")
        assert ledger.id not in client.list_ledgers()


def test_leader_election_from_threads(cluster: ProcessCluster) -> None:
    path = "/elections/sync"
    url = cluster.metadata_url
    with (
        walkit.sync.LeaderElection(url, path, "a", lease_timeout=1.0) as a,
        walkit.sync.LeaderElection(url, path, "b", lease_timeout=1.0) as b,
    ):
        leader, other = (a, b) if a.is_leader else (b, a)
        assert leader.is_leader and not other.is_leader
        assert other.leader == leader.leader
        assert leader.confirm()
        seen = other.generation
        leader.resign()
        while not other.is_leader:
            assert other.wait_changed(seen, timeout=30), "no takeover"
            seen = other.generation
        assert other.confirm()


def test_many_threads_one_writer_records_share_entries(cluster: ProcessCluster) -> None:
    with (
        walkit.sync.Client.connect(cluster.metadata_url) as client,
        walkit.sync.Log.open(client, "threads") as log,
    ):
        results: dict[int, list[walkit.LogPosition]] = {}
        with log.writer() as writer:

            def work(n: int) -> None:
                results[n] = [writer.append(b"%d-%d" % (n, i)) for i in range(100)]

            threads = [threading.Thread(target=work, args=(n,)) for n in range(32)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        records = list(log.reader(follow=False))
        assert len(records) == 3200
        payload = {r.position: r.payload for r in records}
        for n, positions in results.items():
            assert [payload[p] for p in positions] == [b"%d-%d" % (n, i) for i in range(100)]
        assert len({(p.ledger_seq, p.entry_id) for p in payload}) < 3200


def test_the_backends(tmp_path: Path) -> None:
    """trio and uvloop serve a sync client as asyncio does; a wrong name says so."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 3):
        backends: list[walkit.sync.Backend] = ["trio"]
        try:
            import uvloop  # noqa: F401
        except ImportError:
            pass
        else:
            backends.append("uvloop")
        for backend in backends:
            with (
                walkit.sync.Client.connect(url, backend=backend) as client,
                walkit.sync.Log.open(client, f"on-{backend}") as log,
            ):
                with log.writer() as writer:
                    pos = writer.append(backend.encode())
                assert [r.position for r in log.reader(follow=False)] == [pos]
        with pytest.raises(walkit.ConfigurationError, match="backend"):
            walkit.sync.Client.connect(url, backend="gevent")  # type: ignore[arg-type]


def test_idle_past_the_lease_and_session_timeouts_a_leader_and_its_writer_go_on(
    cluster: ProcessCluster,
) -> None:
    """The loop thread renews the lease and the metadata session by itself: while no
    application thread calls in, for many times the lease and session timeouts, the leader
    keeps its lead and its writer its log."""
    path = "/elections/idle"
    url = cluster.metadata_url
    with (
        walkit.sync.Client.connect(url, metadata_options={"session_timeout": 1.0}) as client,
        walkit.sync.LeaderElection(url, path, "a", lease_timeout=0.5) as a,
        walkit.sync.LeaderElection(url, path, "b", lease_timeout=0.5) as b,
        walkit.sync.Log.open(client, "idle") as log,
    ):
        leader, other = (a, b) if a.is_leader else (b, a)
        with log.writer() as writer:
            before = writer.append(b"before")
            # Twelve leases, six sessions: no change of leader may come meanwhile.
            assert not other.wait_changed(other.generation, timeout=6.0)
            assert leader.is_leader and leader.confirm()
            after = writer.append(b"after")
        # (Read once the writer closed the ledger: a reader sees up to the last entry then.)
        records = [(r.position, r.payload) for r in log.reader(follow=False)]
        assert records == [(before, b"before"), (after, b"after")]
