"""Options of ``Log.open`` (how ledgers are rolled, snapshots kept, records read)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, final

import attrs

from walkit._core.options import options_from_kwargs
from walkit._core.record_set import MAX_BODY_BYTES, Codec, check_codec_available
from walkit.errors import ConfigurationError

__all__ = ["LogOptions"]


def _positive_int(optional: bool) -> Any:
    def check(_instance: Any, attribute: Any, value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(
                f"log option {attribute.name} must be an int >= 1"
                f"{' or None' if optional else ''}, not {value!r}"
            )

    return check


def _count(_instance: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"log option {attribute.name} must be an int >= 0, not {value!r}")


def _codec(value: Any) -> Codec:
    if not isinstance(value, str | Codec):
        raise ConfigurationError(f"log option compression must be a string, not {value!r}")
    codec = Codec.parse(value)
    check_codec_available(codec)
    return codec


def _seconds(optional: bool, positive: bool = False) -> Any:
    def check(_instance: Any, attribute: Any, value: Any) -> None:
        if value is None and optional:
            return
        bad = isinstance(value, bool) or not isinstance(value, int | float)
        if not bad:
            bad = not (0 < value < math.inf) if positive else not (0 <= value < math.inf)
        if bad:
            raise ConfigurationError(
                f"log option {attribute.name} must be a number of seconds "
                f"{'> 0' if positive else '>= 0'}{' or None' if optional else ''}, not {value!r}"
            )

    return check


def _non_negative_int(_instance: Any, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"log option {attribute.name} must be an int >= 0 or None, not {value!r}"
        )


def _password(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray):
        raise ConfigurationError(f"log option password must be bytes, not {type(value).__name__}")
    return bytes(value)


@final
@attrs.frozen
class LogOptions:
    """Every option of a log handle, with its default."""

    #: Roll to a new ledger once the current one holds this many acknowledged records (None:
    #: never by count).
    roll_entries: int | None = attrs.field(default=1_000_000, validator=_positive_int(True))
    #: Roll once the current ledger holds this many acknowledged payload bytes (None: never).
    roll_bytes: int | None = attrs.field(default=64 * 1024 * 1024, validator=_positive_int(True))
    #: The password of the log's ledgers (data and snapshots).
    password: bytes = attrs.field(default=b"", converter=_password)
    #: Snapshots kept in the metadata (the oldest's ledger is deleted when a new one is saved).
    keep_snapshots: int = attrs.field(default=3, validator=_positive_int(False))
    #: Snapshot bytes per ledger entry.
    snapshot_chunk_size: int = attrs.field(default=1024 * 1024, validator=_positive_int(False))
    #: Entries a reader fetches from the bookies at once (at most: a range also stops at
    #: about 4 MiB of entries).
    read_batch: int = attrs.field(default=256, validator=_positive_int(False))
    #: Ranges a reader fetches ahead of the one it is handing out (0: none), while it reads
    #: closed ledgers and confirmed entries.
    read_ahead: int = attrs.field(default=2, validator=_count)
    #: Largest record set: records that arrive while an entry is in flight share the next
    #: entry, up to this many bytes (a lone record is sent at once, whatever its size).
    batch_bytes: int = attrs.field(
        default=64 * 1024,
        validator=[_positive_int(False), attrs.validators.le(MAX_BODY_BYTES)],
    )
    #: How the writer compresses each entry: "none", "zstd" or "lz4" (the ``compression``
    #: extra). Each entry records its codec, so readers need no setting.
    compression: Codec = attrs.field(default=Codec.NONE, converter=_codec)
    #: Rounds of a writer takeover (each re-reads the log after losing a race to another
    #: writer) before giving up with WriterFencedError.
    takeover_attempts: int = attrs.field(default=10, validator=_positive_int(False))
    #: Retention (None: no limit of that kind): the writer drops whole closed ledgers from the
    #: front of the log once the ledgers after them hold at least this many records ...
    retain_records: int | None = attrs.field(default=None, validator=_non_negative_int)
    #: ... or at least this many payload bytes ...
    retain_bytes: int | None = attrs.field(default=None, validator=_non_negative_int)
    #: ... or once their newest record is older than this many seconds (needs a client with a
    #: ``wall_clock``). Never the current ledger, nor the latest snapshot's or later ones.
    retain_age: float | None = attrs.field(default=None, validator=_seconds(True))
    #: A reader tailing an open ledger while a later one is listed (its writer died in the
    #: middle of a roll) recovers that ledger itself after this many seconds without progress
    #: (None: wait for the next writer's takeover).
    stalled_ledger_timeout: float | None = attrs.field(
        default=3.0, validator=_seconds(True, positive=True)
    )
    #: After a takeover, the writer deletes (in the background) ledgers tagged with the log's
    #: name that the log does not list and that were created over this many seconds ago
    #: (None: never; needs a client with a ``wall_clock``).
    orphan_gc_grace: float | None = attrs.field(default=3600.0, validator=_seconds(True))

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any]) -> LogOptions:
        return options_from_kwargs(cls, options, "log")
