"""walkit.sync's twins of the async API, each through a real cluster (bookie processes on
sqlite metadata): what they return and what they change in the cluster."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

import walkit
import walkit.sync
from tests._cluster import ProcessCluster, process_cluster
from walkit import LogPosition

pytestmark = pytest.mark.processes

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("sync-api")
    with process_cluster(f"sqlite:///{root / 'metadata.db'}", root, 3) as c:
        yield c


@pytest.fixture
def client(cluster: ProcessCluster) -> Iterator[walkit.sync.Client]:
    with walkit.sync.Client.connect(cluster.metadata_url, add_timeout=5.0) as c:
        assert c.options.add_timeout == 5.0  # a typed option keyword reaches the client
        yield c


def _name() -> str:
    return f"api-{next(_names)}"


def test_ledgers(client: walkit.sync.Client) -> None:
    with client.create_ledger(3, 2, 2, password=b"pw", store_password=False) as lw:
        assert lw.pending_count == 0 and lw.has_room
        last = lw.append_batch([b"a", b"bc"])[-1]
        lw.check_acknowledged(last)
        assert lw.length == 3
        lw.close(custom_metadata={"mine": b"1"})
    md = client.ledger_metadata(lw.id)
    assert md.is_closed and md.custom_metadata.get("mine") == b"1"
    assert md.password is None  # store_password=False kept it out of the metadata
    with client.open_ledger(lw.id, password=b"pw") as reader:
        assert [e.payload for e in reader.read(0, 1)] == [b"a", b"bc"]
    reader.close()  # idempotent


def test_open_options_and_the_writers_idempotent_appends(client: walkit.sync.Client) -> None:
    name = _name()
    with pytest.raises(walkit.NoSuchLogError):
        walkit.sync.Log.open(client, name, create=False)
    with walkit.sync.Log.open(client, name, roll_entries=2, ensemble_size=3) as log:
        assert log.options.roll_entries == 2 and log.client is client
        with log.writer() as w:
            first = w.append(b"p0", producer_id="p", sequence=0)
            with pytest.raises(walkit.DuplicateRecordError) as dup:
                w.append(b"p0", producer_id="p", sequence=0)
            assert dup.value.position == first
            group = w.append_batch([b"g0", b"g1"], flush=True)
            w.append(b"r")  # the roll is due: a second ledger
            assert w.ledger_seq == group[-1].ledger_seq + 1
            assert w.ledger_id == log.metadata().ledgers[-1].ledger_id
        with log.reader(follow=False) as reader:
            assert reader.lag_records() >= 0
            assert [r.payload for r in reader] == [b"p0", b"g0", b"g1", b"r"]
        reader.close()
        with log.consumer("c", follow=False) as consumer:  # registered on entry
            records = list(consumer)
            assert consumer.reader_lag() == 0
            consumer.commit(records[0].position)
        assert [c.name for c in log.consumers()] == ["c"]


def test_retention_is_typed(client: walkit.sync.Client) -> None:
    with walkit.sync.Log.open(client, _name(), roll_entries=1) as log:
        with log.writer() as w:
            for i in range(4):
                w.append(b"r%d" % i)
        planned = log.apply_retention(retain_records=1, dry_run=True)
        assert isinstance(planned, walkit.log.RetentionResult) and planned.dropped
        done = log.apply_retention(retain_records=1)
        assert done.truncated == planned.truncated
        assert [r.payload for r in log.reader(follow=False)] == [b"r3"]


def test_staged_ledgers_link_and_discard(client: walkit.sync.Client) -> None:
    with walkit.sync.Log.open(client, _name()) as log:
        with log.writer() as w:
            w.append(b"before")
        ids = []
        for part in range(2):
            with log.stage_ledger("job", part) as staged:
                staged.append_batch([b"bulk%d" % part])
            ids.append(staged.id)
        with log.stage_ledger("other", 0) as dropped:
            dropped.append(b"never linked")
        assert {s.ledger_id for s in log.staged_ledgers()} == {*ids, dropped.id}
        result = log.link_ledgers(ids, job="job")
        assert result.records == 2
        assert [r.payload for r in log.reader(follow=False)] == [b"before", b"bulk0", b"bulk1"]
        assert log.discard_staged("other") == [dropped.id]
        assert log.staged_ledgers() == []


def test_orphans_are_collected(cluster: ProcessCluster) -> None:
    now = [1_000_000.0]
    with walkit.sync.Client.connect(cluster.metadata_url, wall_clock=lambda: now[0]) as client:
        name = _name()
        with walkit.sync.Log.open(client, name) as log:
            staged = log.stage_ledger("job", 0)
            staged.close()
            now[0] += 50
            assert walkit.sync.Log.collect_orphans(client, name, grace=100) == []
            [found] = walkit.sync.Log.collect_orphans(client, name, grace=10, dry_run=True)
            assert found.ledger_id == staged.id and not found.deleted
            [done] = walkit.sync.Log.collect_orphans(client, name, grace=10)
            assert done.deleted and staged.id not in client.list_ledgers()


def test_snapshot_chunks(client: walkit.sync.Client) -> None:
    with walkit.sync.Log.open(client, _name()) as log:
        with log.writer() as w:
            pos = w.append(b"x")
        saved = log.save_snapshot(pos, iter([b"ab", b"cd"]))
        assert (saved.position, saved.size) == (pos, 4)
        latest = log.latest_snapshot()
        assert latest is not None and latest.crc32c == saved.crc32c
        assert b"".join(latest.chunks()) == b"".join(latest) == latest.read() == b"abcd"


class Counter:
    """A state machine: counts commands."""

    def __init__(self) -> None:
        self.count = 0

    def apply(self, command: bytes, position: LogPosition) -> Any:
        self.count += int(command)
        return self.count

    def snapshot(self) -> bytes:
        return b"%d" % self.count

    def restore(self, data: bytes) -> None:
        self.count = int(data)


def test_a_replica_leads_and_another_recovers(client: walkit.sync.Client) -> None:
    name = _name()
    with walkit.sync.Log.open(client, name) as log:
        machine = Counter()
        replica = walkit.sync.Replica(log, machine, snapshot_every=2)
        with replica.lead() as leader:
            assert leader.submit(b"1") == 1
            assert leader.submit_batch([b"2", b"3"], flush=True) == [3, 6]
            assert leader.submit(b"4", producer_id="p", sequence=0) == 10
            leader.snapshot()
            end = leader.writer.end_position
        assert replica.applied_count == 4 and replica.next_position > replica.applied_position
        other = Counter()
        follower = walkit.sync.Replica(log, other)
        follower.recover()
        follower.wait_applied(replica.applied_position)
        assert other.count == 10 and end.ledger_seq == follower.applied_position.ledger_seq


def test_election_step_downs(cluster: ProcessCluster) -> None:
    with walkit.sync.LeaderElection(cluster.metadata_url, "/election/api", "me") as election:
        assert election.is_leader and election.step_downs == 0
        generation = election.generation
        election.resign()
        # The driver counts the step-down when it learns of the closed session, and takes
        # part again: wait for the changes until it has.
        while election.step_downs == 0:
            assert election.wait_changed(generation, timeout=30)
            generation = election.generation
        assert election.step_downs == 1
