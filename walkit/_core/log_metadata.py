"""Log metadata (one node per log under ``/logs``): the model, its transitions, and the
decisions of takeover, roll and truncation. Pure and synchronous; the log layer reads the node,
asks this module what the new value is, and writes it back with a compare-and-set.

Serialized as readable JSON with a format version::

    {"format": 1, "name": "orders",
     "config": {"ensemble_size": 3, "write_quorum": 2, "ack_quorum": 2, "digest": "crc32c"},
     "next_seq": 5,
     "ledgers": [{"seq": 3, "ledger_id": 14}, {"seq": 4, "ledger_id": 15}],
     "truncated": "3:0",
     "snapshots": [{"position": "3:17", "ledger_id": 20, "size": 1234, "crc32c": 99,
                    "time_ms": 0}],
     "ctime_ms": 0,
     "sinks": {"3f2a...": 41}}

A log whose ledgers do not keep their password in their own metadata (created with
``store_password=False``) says so in its config (``"store_password": false``) and is written
as format 2: readers that predate the option refuse it rather than rewrite the node without
it (their writers would drop the key, and the log's next ledgers would keep the password
after all). Every other log stays format 1.

``sinks`` (present only when not empty) maps a streaming sink's query id to the last batch id
it committed into the log (see :meth:`LogMetadata.after_link`): the mark that makes a replayed
micro-batch a no-op.

A log that has had durable consumers (children of its node, ``walkit.log._consumers``) says
so (``"consumers": true``) and is written as format 3, whatever its config: readers that
predate consumers refuse it rather than apply retention without them.

A log with ledgers offloaded to the lake (``walkit._core.lake``) lists them under
``"offloaded"`` (one :class:`~walkit._core.lake.LakeLedger` each, in log order) and is written
as format 4, whatever else it holds: readers that predate the lake would read those ledgers
from the bookies, where they may be gone.

A typed log (``Log.open(..., schema=T)``) keeps every version of its schema under
``"schemas"`` (:class:`~walkit._core.schema.SchemaVersion`, oldest first, numbered from 1),
and each ledger the version its records were written with (``"schema": N`` in its item of
``"ledgers"``; absent: written without a schema): a ledger has one writer, and a writer one
schema, so a record's version costs no byte of the record. Such a node is format 5, whatever
else it holds: older writers would rewrite it without the versions.

Invariants (checked on every parse and every transition):

- ledgers are ordered by ``seq``, which is strictly increasing, >= 1 and < ``next_seq``;
- no ledger id appears twice (data or snapshot);
- every listed ledger holds records at or after the truncation point (ledgers wholly before it
  leave the list in the same CAS that moves it);
- the last listed ledger is the only one a writer may append new records to;
- sink marks are ordered by query id, one per query, with batch ids >= 0.

Besides a writer's takeover and rolls, closed ledgers written elsewhere (by the tasks of a bulk
job, say a Spark write) can be *linked* at the end of the list, after fencing the current
writer like a takeover does: :meth:`LogMetadata.after_link`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import attrs

from walkit._core.digest import DigestType
from walkit._core.lake import LakeLedger
from walkit._core.ledger_metadata import validate_quorums
from walkit._core.log_position import MAX_COMPONENT, LogPosition
from walkit._core.schema import SchemaVersion
from walkit.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    SchemaError,
    WalkitError,
    WriterFencedError,
)

FORMAT_VERSION: Final = 1
#: The format of a log whose config carries an option older readers must not drop.
FORMAT_VERSION_OPT_OUT: Final = 2
#: The format of a log with durable consumers (``/logs/<name>/consumers``): readers that
#: predate them would apply retention without them and delete what they have not committed.
FORMAT_VERSION_CONSUMERS: Final = 3
#: The format of a log with offloaded ledgers: readers that predate the lake would look for
#: them on the bookies.
FORMAT_VERSION_LAKE: Final = 4
#: The format of a typed log: its schema versions, and each ledger's version.
FORMAT_VERSION_SCHEMAS: Final = 5
#: The snapshot format this walkit writes: the state's bytes cut into the entries of a closed
#: ledger, in order, with their size and CRC32C in the record (docs/formats.md).
SNAPSHOT_FORMAT: Final = 1
#: The snapshot formats it reads; a record without a ``format`` key is format 1.
SNAPSHOT_FORMATS: Final = frozenset({1})

#: The formats this walkit reads.
_FORMATS: Final = (
    FORMAT_VERSION,
    FORMAT_VERSION_OPT_OUT,
    FORMAT_VERSION_CONSUMERS,
    FORMAT_VERSION_LAKE,
    FORMAT_VERSION_SCHEMAS,
)

#: What a log name may look like (it is a metadata node name on every driver).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")

#: How many ledgers a takeover recovers (fences) from the end of the list: a writer that died
#: in the middle of a roll (new ledger listed, old one not yet closed) leaves two open.
RECOVER_LAST: Final = 2


@final
@attrs.frozen
class LedgerConfig:
    """How the log's ledgers are created."""

    ensemble_size: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    digest: DigestType = DigestType.CRC32C
    #: The ledgers' password, generated when the log was created without one (hex; "" for logs
    #: created with an explicit password, or before passwords were generated). It keeps the
    #: ledgers' master key away from whoever can reach the bookies but not the metadata store.
    password_hex: str = attrs.field(default="", repr=False)
    #: Whether the log's ledgers keep their password in their own metadata, for autorecovery
    #: (see ``Client.create_ledger``). Fixed when the log is created.
    store_password: bool = True

    def __attrs_post_init__(self) -> None:
        validate_quorums(self.ensemble_size, self.write_quorum, self.ack_quorum)
        if not isinstance(self.store_password, bool):
            raise InvalidArgumentError(
                f"store_password must be a bool, not {self.store_password!r}"
            )
        try:
            bytes.fromhex(self.password_hex)
        except ValueError:
            raise InvalidArgumentError("the log's stored password is not hex") from None

    @property
    def password(self) -> bytes:
        return bytes.fromhex(self.password_hex)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "digest": self.digest.value,
        }
        if self.password_hex:
            doc["password"] = self.password_hex
        if not self.store_password:
            doc["store_password"] = False
        return doc


@final
@attrs.frozen(order=True)
class LogLedger:
    """One ledger of the log: its sequence number (what positions carry), its id, and the
    schema version its records were written with (0: none)."""

    seq: int
    ledger_id: int
    schema: int = 0

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"seq": self.seq, "ledger_id": self.ledger_id}
        if self.schema:
            doc["schema"] = self.schema
        return doc


@final
@attrs.frozen
class SnapshotRecord:
    """A saved snapshot: the state after applying every record up to ``position``
    (inclusive), stored as the entries of the closed ledger ``ledger_id``."""

    position: LogPosition
    ledger_id: int
    size: int
    crc32c: int
    time_ms: int = 0
    #: How the snapshot's bytes are laid out in its ledger (:data:`SNAPSHOT_FORMATS`).
    version: int = SNAPSHOT_FORMAT

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "position": str(self.position),
            "ledger_id": self.ledger_id,
            "size": self.size,
            "crc32c": self.crc32c,
            "time_ms": self.time_ms,
        }
        if self.version != 1:  # (absent: format 1, what snapshots were before the key)
            doc["format"] = self.version
        return doc


@final
@attrs.frozen
class Truncation:
    """The outcome of a truncation: the new metadata and the ledgers it dropped."""

    metadata: LogMetadata
    dropped: tuple[LogLedger, ...]
    #: The dropped ledgers that were offloaded (remove their files from the lake).
    dropped_lake: tuple[LakeLedger, ...] = ()


@final
@attrs.frozen
class Takeover:
    """The outcome of a takeover: the new metadata (with the writer's ledger last) and the
    recovered ledgers that turned out empty and left the list (delete them after the CAS)."""

    metadata: LogMetadata
    ledger: LogLedger
    dropped: tuple[LogLedger, ...]


@final
@attrs.frozen(order=True)
class SinkMark:
    """The last batch that a streaming sink (one query) committed into the log."""

    query_id: str
    batch_id: int


@final
@attrs.frozen
class Link:
    """The outcome of linking closed ledgers into the log (:meth:`LogMetadata.after_link`).

    ``linked``: the given ledgers with the sequence numbers they got (empty for a replay or
    when nothing was given). ``dropped``: recovered ledgers that turned out empty and left
    the list (delete them after the CAS). ``replayed``: the sink's batch was committed before,
    so nothing changed (delete the given ledgers: they hold a second copy). ``done_before``:
    the ledgers were already linked (an earlier try of this very link got through).
    """

    metadata: LogMetadata
    linked: tuple[LogLedger, ...]
    dropped: tuple[LogLedger, ...]
    replayed: bool = False
    done_before: bool = False


@final
@attrs.frozen
class LogMetadata:
    """Everything the metadata store knows about one log. Immutable: transitions return a copy
    for the caller to compare-and-set."""

    name: str
    config: LedgerConfig = attrs.field(factory=LedgerConfig)
    next_seq: int = 1
    ledgers: tuple[LogLedger, ...] = ()
    truncated: LogPosition = LogPosition.EARLIEST
    snapshots: tuple[SnapshotRecord, ...] = ()
    ctime_ms: int = 0
    sinks: tuple[SinkMark, ...] = ()
    #: Whether durable consumers were registered (their nodes are this node's children).
    consumers: bool = False
    #: The listed ledgers offloaded to the lake, in log order.
    offloaded: tuple[LakeLedger, ...] = ()
    #: Every version of a typed log's schema, oldest first (``walkit._core.schema``).
    schemas: tuple[SchemaVersion, ...] = ()

    def __attrs_post_init__(self) -> None:
        _validate(self)

    # --- queries ---------------------------------------------------------------------------

    @property
    def last(self) -> LogLedger | None:
        """The ledger new records go to (None before the first writer)."""
        return self.ledgers[-1] if self.ledgers else None

    def owned_by(self, ledger: LogLedger) -> bool:
        """Whether a writer whose current ledger is ``ledger`` still owns the log."""
        return self.last == ledger

    def ledger_at_or_after(self, seq: int) -> LogLedger | None:
        """The first listed ledger whose seq is >= ``seq``."""
        for ledger in self.ledgers:
            if ledger.seq >= seq:
                return ledger
        return None

    def ledger_with_seq(self, seq: int) -> LogLedger | None:
        for ledger in self.ledgers:
            if ledger.seq == seq:
                return ledger
        return None

    def start_position(self, start: LogPosition) -> LogPosition:
        """Where a reader asked to start at ``start`` really starts: not before the
        truncation point (LATEST is resolved by the reader against the ledgers' ends)."""
        return max(start, self.truncated)

    def to_recover(self) -> tuple[LogLedger, ...]:
        """The ledgers a takeover fences and recovers: the last two."""
        return self.ledgers[-RECOVER_LAST:]

    @property
    def latest_snapshot(self) -> SnapshotRecord | None:
        return self.snapshots[-1] if self.snapshots else None

    def lake_ledger(self, ledger_id: int) -> LakeLedger | None:
        """The offload record of a listed ledger (None: it lives on the bookies only)."""
        for lake in self.offloaded:
            if lake.ledger_id == ledger_id:
                return lake
        return None

    def with_offloaded(self, lake: LakeLedger) -> LogMetadata:
        """Record ``lake`` (a listed ledger's offload, or a change of it). Raises
        InvalidArgumentError when its ledger is not listed (retention dropped it)."""
        if not any(lg.ledger_id == lake.ledger_id for lg in self.ledgers):
            raise InvalidArgumentError(
                f"log {self.name}: ledger {lake.ledger_id} is not listed (truncated?)"
            )
        others = {x.ledger_id: x for x in self.offloaded if x.ledger_id != lake.ledger_id}
        others[lake.ledger_id] = lake
        return attrs.evolve(self, offloaded=_in_log_order(self.ledgers, others))

    def ledger_ids(self) -> set[int]:
        return {lg.ledger_id for lg in self.ledgers} | {s.ledger_id for s in self.snapshots}

    def sink_batch(self, query_id: str) -> int | None:
        """The last batch id the streaming sink ``query_id`` committed (None: none yet)."""
        for mark in self.sinks:
            if mark.query_id == query_id:
                return mark.batch_id
        return None

    # --- transitions -----------------------------------------------------------------------

    def after_takeover(
        self, recovered_last_entries: Mapping[int, int], new_ledger_id: int, schema: int = 0
    ) -> Takeover:
        """Append the new writer's ledger, dropping recovered ledgers that are empty.

        ``recovered_last_entries`` maps the id of each ledger of :meth:`to_recover` to the last
        entry id its recovery closed it at (-1: empty). Raises InvalidArgumentError if a ledger
        to recover is missing from it (the caller must recover both before taking over).
        ``schema``: the version the new writer writes (0: none; see
        :func:`walkit._core.schema.register` for adding it to :attr:`schemas` first).
        """
        for ledger in self.to_recover():
            if ledger.ledger_id not in recovered_last_entries:
                raise InvalidArgumentError(f"ledger {ledger.ledger_id} was not recovered")
        dropped = tuple(lg for lg in self.to_recover() if recovered_last_entries[lg.ledger_id] < 0)
        kept = tuple(lg for lg in self.ledgers if lg not in dropped)
        new = LogLedger(self.next_seq, new_ledger_id, schema)
        md = attrs.evolve(
            self, ledgers=(*kept, new), next_seq=self.next_seq + 1, offloaded=self._lake_of(kept)
        )
        return Takeover(md, new, dropped)

    def to_recover_for_link(
        self, ledger_ids: Sequence[int], sink: SinkMark | None = None
    ) -> tuple[LogLedger, ...]:
        """The ledgers to fence and recover before :meth:`after_link` can link ``ledger_ids``:
        the last two, unless the link changes no ledger (nothing to link, done before, or a
        replayed sink batch)."""
        ids = tuple(ledger_ids)
        if not ids:
            return ()
        listed = {lg.ledger_id for lg in self.ledgers}
        if all(i in listed for i in ids):
            return ()
        if sink is not None:
            committed = self.sink_batch(sink.query_id)
            if committed is not None and committed >= sink.batch_id:
                return ()
        return self.to_recover()

    def after_link(
        self,
        recovered_last_entries: Mapping[int, int],
        ledger_ids: Sequence[int],
        sink: SinkMark | None = None,
        schema: int = 0,
    ) -> Link:
        """List the closed, non-empty ledgers ``ledger_ids`` last, in the given order, as if
        one writer had appended their records after the log's end; with ``sink``, record its
        batch as committed in the same change.

        Like a takeover, this needs the last two ledgers fenced first:
        ``recovered_last_entries`` maps their ids to the last entry id recovery closed them at
        (-1: empty; empty ones leave the list). No ledger is left open afterwards, so the next
        :meth:`after_takeover` starts a writer after the linked records.

        - If every one of ``ledger_ids`` is listed already (an earlier try of this link got
          through), nothing changes (``done_before``).
        - If ``sink``'s query already committed ``sink.batch_id`` or a later batch, nothing
          changes (``replayed``): the caller deletes the given ledgers.
        - With no ledgers (an empty batch), only the sink mark moves; nothing is fenced.

        Raises InvalidArgumentError when a ledger to recover is missing from
        ``recovered_last_entries``, or a given ledger is repeated or belongs to the log
        already (alone, or as a snapshot).
        """
        ids = tuple(ledger_ids)
        if len(set(ids)) != len(ids):
            raise InvalidArgumentError(f"log {self.name}: a ledger to link is repeated: {ids}")
        listed = {lg.ledger_id: lg for lg in self.ledgers}
        if ids and all(i in listed for i in ids):
            return Link(self, tuple(listed[i] for i in ids), (), done_before=True)
        if sink is not None:
            if sink.batch_id < 0:
                raise InvalidArgumentError(f"batch ids are >= 0, not {sink.batch_id}")
            committed = self.sink_batch(sink.query_id)
            if committed is not None and committed >= sink.batch_id:
                return Link(self, (), (), replayed=True)
        taken = self.ledger_ids() & set(ids)
        if taken:
            raise InvalidArgumentError(
                f"log {self.name}: ledger(s) {sorted(taken)} belong to the log already"
            )
        sinks = self.sinks
        if sink is not None:
            others = tuple(m for m in self.sinks if m.query_id != sink.query_id)
            sinks = tuple(sorted((*others, sink)))
        if not ids:
            return Link(attrs.evolve(self, sinks=sinks), (), ())
        for ledger in self.to_recover():
            if ledger.ledger_id not in recovered_last_entries:
                raise InvalidArgumentError(f"ledger {ledger.ledger_id} was not recovered")
        dropped = tuple(lg for lg in self.to_recover() if recovered_last_entries[lg.ledger_id] < 0)
        kept = tuple(lg for lg in self.ledgers if lg not in dropped)
        new = tuple(
            LogLedger(self.next_seq + i, ledger_id, schema) for i, ledger_id in enumerate(ids)
        )
        md = attrs.evolve(
            self,
            ledgers=(*kept, *new),
            next_seq=self.next_seq + len(ids),
            sinks=sinks,
            offloaded=self._lake_of(kept),
        )
        return Link(md, new, dropped)

    def after_roll(self, current: LogLedger, new_ledger_id: int) -> tuple[LogMetadata, LogLedger]:
        """A roll by the owner of ``current``: the new ledger goes last. Raises
        WriterFencedError when ``current`` is no longer last (another writer took over)."""
        if not self.owned_by(current):
            raise WriterFencedError(
                f"log {self.name}: another writer took over (ledger {current.ledger_id} is no "
                "longer the log's current ledger)"
            )
        new = LogLedger(self.next_seq, new_ledger_id, current.schema)
        return attrs.evolve(self, ledgers=(*self.ledgers, new), next_seq=self.next_seq + 1), new

    def truncated_at(self, pos: LogPosition) -> Truncation:
        """Move the truncation point to ``pos`` (never backwards) and drop the ledgers wholly
        before it. ``pos`` may not be past the log's end (the current ledger's seq)."""
        self.check_not_future(pos, "truncate at")
        if pos <= self.truncated:
            return Truncation(self, ())
        dropped = tuple(lg for lg in self.ledgers if lg.seq < pos.ledger_seq)
        kept = tuple(lg for lg in self.ledgers if lg.seq >= pos.ledger_seq)
        gone = {lg.ledger_id for lg in dropped}
        return Truncation(
            attrs.evolve(self, ledgers=kept, truncated=pos, offloaded=self._lake_of(kept)),
            dropped,
            tuple(x for x in self.offloaded if x.ledger_id in gone),
        )

    def with_snapshot(
        self, record: SnapshotRecord, keep: int
    ) -> tuple[LogMetadata, tuple[SnapshotRecord, ...]]:
        """Add a snapshot, keeping the ``keep`` latest by position; returns the dropped ones
        (delete their ledgers after the CAS)."""
        if keep < 1:
            raise InvalidArgumentError(f"keep must be >= 1, not {keep}")
        self.check_not_future(record.position, "snapshot at")
        if record.ledger_id in self.ledger_ids():
            raise InvalidArgumentError(f"ledger {record.ledger_id} already belongs to the log")
        ordered = sorted(
            (*self.snapshots, record), key=lambda s: (s.position, s.time_ms, s.ledger_id)
        )
        kept = tuple(ordered[-keep:])
        dropped = tuple(s for s in ordered if s not in kept)
        return attrs.evolve(self, snapshots=kept), dropped

    def check_not_future(self, pos: LogPosition, what: str) -> None:
        """Refuse LATEST and positions in ledgers that do not exist yet."""
        if pos == LogPosition.LATEST:
            raise InvalidArgumentError(f"cannot {what} LATEST: pass a record's position")
        if pos != LogPosition.EARLIEST and pos.ledger_seq >= self.next_seq:
            raise InvalidArgumentError(
                f"cannot {what} {pos}: log {self.name} has no ledger {pos.ledger_seq} yet"
            )

    def _lake_of(self, kept: Sequence[LogLedger]) -> tuple[LakeLedger, ...]:
        """The offload records of the ``kept`` ledgers."""
        ids = {lg.ledger_id for lg in kept}
        return tuple(x for x in self.offloaded if x.ledger_id in ids)

    def with_consumers(self) -> LogMetadata:
        """The log as one with durable consumers (format 3)."""
        return self if self.consumers else attrs.evolve(self, consumers=True)

    # --- serialization ---------------------------------------------------------------------

    @property
    def format(self) -> int:
        """The format this log's node is written in (the oldest that holds it)."""
        if self.schemas:
            return FORMAT_VERSION_SCHEMAS
        if self.offloaded:
            return FORMAT_VERSION_LAKE
        if self.consumers:
            return FORMAT_VERSION_CONSUMERS
        return FORMAT_VERSION if self.config.store_password else FORMAT_VERSION_OPT_OUT

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = {
            "format": self.format,
            "name": self.name,
            "config": self.config.to_json(),
            "next_seq": self.next_seq,
            "ledgers": [lg.to_json() for lg in self.ledgers],
            "truncated": str(self.truncated),
            "snapshots": [s.to_json() for s in self.snapshots],
            "ctime_ms": self.ctime_ms,
        }
        if self.sinks:
            doc["sinks"] = {m.query_id: m.batch_id for m in self.sinks}
        if self.consumers:
            doc["consumers"] = True
        if self.offloaded:
            doc["offloaded"] = [x.to_json() for x in self.offloaded]
        if self.schemas:
            doc["schemas"] = [v.to_json() for v in self.schemas]
        return json.dumps(doc, separators=(",", ":")).encode("utf-8")

    def to_json(self) -> dict[str, Any]:
        """A plain dict (for the CLI and for people)."""
        doc: dict[str, Any] = json.loads(self.to_bytes())
        return doc

    @classmethod
    def from_bytes(cls, name: str, data: bytes) -> LogMetadata:
        """Parse a log's node; anything malformed raises InvalidMetadataError."""
        try:
            doc = json.loads(bytes(data).decode("utf-8"))
            if not isinstance(doc, dict):
                raise TypeError("not a JSON object")
            if doc.get("format") not in _FORMATS:
                raise InvalidMetadataError(
                    f"log {name}: unsupported metadata format {doc.get('format')!r}"
                )
            if doc.get("name") != name:
                raise InvalidMetadataError(
                    f"log {name}: the node names another log ({doc.get('name')!r})"
                )
            config = doc["config"]
            if not isinstance(config, dict):
                raise TypeError("config is not an object")
            ledgers = doc["ledgers"]
            snapshots = doc["snapshots"]
            if not isinstance(ledgers, list) or not isinstance(snapshots, list):
                raise TypeError("ledgers and snapshots must be lists")
            sinks = doc.get("sinks", {})
            if not isinstance(sinks, dict):
                raise TypeError("sinks is not an object")
            store_password = _bool(config.get("store_password", True))
            if doc["format"] == FORMAT_VERSION_OPT_OUT and store_password:
                raise InvalidMetadataError(
                    f"log {name}: format {FORMAT_VERSION_OPT_OUT} without store_password=false"
                )
            consumers = _bool(doc.get("consumers", False))
            offloaded = doc.get("offloaded", [])
            if not isinstance(offloaded, list) or not all(isinstance(x, dict) for x in offloaded):
                raise TypeError("offloaded is not a list of objects")
            schemas = doc.get("schemas", [])
            if not isinstance(schemas, list):
                raise TypeError("schemas is not a list")
            if (doc["format"] == FORMAT_VERSION_SCHEMAS) != bool(schemas):
                raise InvalidMetadataError(
                    f"log {name}: format {doc['format']} with {len(schemas)} schema versions"
                )
            layered = doc["format"] == FORMAT_VERSION_SCHEMAS  # (holds any of the others)
            if not layered and (doc["format"] == FORMAT_VERSION_LAKE) != bool(offloaded):
                raise InvalidMetadataError(
                    f"log {name}: format {doc['format']} with {len(offloaded)} offloaded ledgers"
                )
            if doc["format"] not in (FORMAT_VERSION_LAKE, FORMAT_VERSION_SCHEMAS) and (
                (doc["format"] == FORMAT_VERSION_CONSUMERS) != consumers
            ):
                raise InvalidMetadataError(
                    f"log {name}: format {doc['format']} with consumers={consumers}"
                )
            return cls(
                name=name,
                config=LedgerConfig(
                    ensemble_size=_int(config["ensemble_size"]),
                    write_quorum=_int(config["write_quorum"]),
                    ack_quorum=_int(config["ack_quorum"]),
                    digest=DigestType(config["digest"]),
                    password_hex=_str(config.get("password", "")),
                    store_password=store_password,
                ),
                next_seq=_int(doc["next_seq"]),
                ledgers=tuple(
                    LogLedger(
                        _int(item["seq"]), _int(item["ledger_id"]), _int(item.get("schema", 0))
                    )
                    for item in ledgers
                ),
                truncated=LogPosition.parse(_str(doc["truncated"])),
                snapshots=tuple(
                    SnapshotRecord(
                        position=LogPosition.parse(_str(s["position"])),
                        ledger_id=_int(s["ledger_id"]),
                        size=_int(s["size"]),
                        crc32c=_int(s["crc32c"]),
                        time_ms=_int(s.get("time_ms", 0)),
                        version=_int(s.get("format", 1)),
                    )
                    for s in snapshots
                ),
                ctime_ms=_int(doc.get("ctime_ms", 0)),
                sinks=tuple(sorted(SinkMark(_str(q), _int(b)) for q, b in sinks.items())),
                consumers=consumers,
                offloaded=tuple(LakeLedger.from_json(x) for x in offloaded),
                schemas=tuple(SchemaVersion.from_json(v) for v in schemas),
            )
        except InvalidMetadataError:
            raise
        except SchemaError as exc:
            raise InvalidMetadataError(f"log {name}: a bad schema version: {exc}") from exc
        except (WalkitError, ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
            raise InvalidMetadataError(f"log {name}: malformed metadata: {exc}") from exc


def check_log_name(name: object) -> str:
    """Return ``name`` if it is a valid log name: 1-200 of ``A-Z a-z 0-9 . _ -``, not starting
    with ``.`` or ``-``. InvalidArgumentError otherwise."""
    return check_name(name, "log")


def check_name(name: object, what: str) -> str:
    """:func:`check_log_name` for other names kept as metadata nodes (``what``: "consumer")."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"a {what} name must be a string, not {type(name).__name__}")
    if not _NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"bad {what} name {name!r}: use 1-200 of A-Z a-z 0-9 . _ - (not starting with . or -)"
        )
    return name


def should_roll(
    entries: int, size: int, *, roll_entries: int | None, roll_bytes: int | None
) -> bool:
    """Whether the current ledger has passed a roll threshold."""
    if roll_entries is not None and entries >= roll_entries:
        return True
    return roll_bytes is not None and size >= roll_bytes


def _validate(md: LogMetadata) -> None:
    name = md.name
    try:
        check_log_name(name)
    except InvalidArgumentError as exc:
        raise InvalidMetadataError(str(exc)) from None
    if not isinstance(md.next_seq, int) or not 1 <= md.next_seq <= MAX_COMPONENT:
        raise InvalidMetadataError(f"log {name}: bad next_seq {md.next_seq!r}")
    previous = 0
    seen: set[int] = set()
    for lg in md.ledgers:
        if lg.seq <= previous:
            raise InvalidMetadataError(f"log {name}: ledger sequence numbers out of order")
        if lg.seq >= md.next_seq:
            raise InvalidMetadataError(f"log {name}: ledger seq {lg.seq} >= next_seq")
        if not 0 <= lg.ledger_id <= MAX_COMPONENT or lg.ledger_id in seen:
            raise InvalidMetadataError(f"log {name}: bad or repeated ledger id {lg.ledger_id}")
        seen.add(lg.ledger_id)
        previous = lg.seq
    if md.truncated == LogPosition.LATEST:
        raise InvalidMetadataError(f"log {name}: truncated at LATEST")
    if md.ledgers and md.ledgers[0].seq < md.truncated.ledger_seq:
        raise InvalidMetadataError(
            f"log {name}: ledger {md.ledgers[0].ledger_id} lies wholly before the truncation "
            f"point {md.truncated}"
        )
    previous_pos = LogPosition.EARLIEST
    for snap in md.snapshots:
        if snap.position == LogPosition.LATEST or snap.position < previous_pos:
            raise InvalidMetadataError(f"log {name}: snapshots out of order")
        if not 0 <= snap.ledger_id <= MAX_COMPONENT or snap.ledger_id in seen:
            raise InvalidMetadataError(f"log {name}: bad or repeated ledger id {snap.ledger_id}")
        if snap.size < 0 or not 0 <= snap.crc32c < 2**32 or snap.time_ms < 0:
            raise InvalidMetadataError(f"log {name}: bad snapshot record {snap}")
        if snap.version not in SNAPSHOT_FORMATS:
            raise InvalidMetadataError(
                f"log {name}: the snapshot at {snap.position} is format {snap.version}; this "
                f"walkit reads {sorted(SNAPSHOT_FORMATS)} (a newer walkit wrote it)"
            )
        seen.add(snap.ledger_id)
        previous_pos = snap.position
    previous_query: str | None = None
    for mark in md.sinks:
        if not isinstance(mark.query_id, str) or not mark.query_id:
            raise InvalidMetadataError(f"log {name}: bad sink query id {mark.query_id!r}")
        if previous_query is not None and mark.query_id <= previous_query:
            raise InvalidMetadataError(f"log {name}: sink marks out of order or repeated")
        if not isinstance(mark.batch_id, int) or mark.batch_id < 0:
            raise InvalidMetadataError(f"log {name}: bad sink batch id {mark.batch_id!r}")
        previous_query = mark.query_id
    order = [lg.ledger_id for lg in md.ledgers]
    at = [order.index(x.ledger_id) if x.ledger_id in order else -1 for x in md.offloaded]
    if any(i < 0 for i in at):
        raise InvalidMetadataError(f"log {name}: an offloaded ledger is not listed")
    if at != sorted(set(at)):
        raise InvalidMetadataError(f"log {name}: offloaded ledgers out of order or repeated")
    for lake in md.offloaded:
        lake.check()
    _validate_schemas(md)


def _validate_schemas(md: LogMetadata) -> None:
    """Versions numbered 1, 2, ... with distinct schemas; ledgers name known versions."""
    name = md.name
    for number, version in enumerate(md.schemas, 1):
        if version.version != number:
            raise InvalidMetadataError(f"log {name}: schema versions out of order or missing")
    if len({v.schema.canonical() for v in md.schemas}) != len(md.schemas):
        raise InvalidMetadataError(f"log {name}: a schema is registered twice")
    for lg in md.ledgers:
        if not isinstance(lg.schema, int) or not 0 <= lg.schema <= len(md.schemas):
            raise InvalidMetadataError(
                f"log {name}: ledger {lg.ledger_id} names schema version {lg.schema!r}, which "
                "the log does not have"
            )


def _in_log_order(
    ledgers: Sequence[LogLedger], records: Mapping[int, LakeLedger]
) -> tuple[LakeLedger, ...]:
    return tuple(records[lg.ledger_id] for lg in ledgers if lg.ledger_id in records)


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value
