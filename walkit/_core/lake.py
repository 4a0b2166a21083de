"""The lake: closed ledgers of a log offloaded to Parquet files of an Apache Iceberg table.

Pure decisions only (the I/O is ``walkit.lake``):

- :class:`LakeLedger`, what a log's metadata records of an offloaded ledger (its data files,
  record count, time range, when it was committed, whether the bookies' copy is gone);
- :func:`to_offload` and :func:`to_delete_from_bookies`, which ledgers a pass works on;
- :func:`table_name` and :func:`data_file_name`, the table and file names (escaping);
- :func:`parse_lake_uri`, the two kinds of lake (``file:///abs/dir``, ``s3://bucket/prefix``).

The steps of one offload (each a fault hook, ``walkit.lake._offload``):

1. the ledger's records are written as Parquet files under the table's location (names carry
   the ledger id and a random token, so two offloaders never write the same file);
2. the files are committed to the table, unless the table holds the ledger already (an Iceberg
   commit asserts the snapshot it was planned on, so of two racing offloaders one commits and
   the other finds the ledger there and deletes its own files);
3. the log's metadata records the ledger as offloaded (a compare-and-set); from then on readers
   read it from the lake;
4. after ``offload_deletion_lag`` seconds the bookies' copy is deleted, then recorded as gone.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from walkit.errors import ConfigurationError, InvalidMetadataError

__all__ = [
    "LAKE_FORMAT",
    "LakeLedger",
    "LakeUri",
    "data_file_name",
    "lake_of_file",
    "ledger_id_of_file",
    "parse_lake_uri",
    "redact",
    "table_name",
    "to_delete_from_bookies",
    "to_offload",
]

#: The layout of the lake's tables and files (docs/formats.md, "The lake").
LAKE_FORMAT: Final = 2
#: The Iceberg namespace of walkit's tables, by default.
NAMESPACE: Final = "walkit"

_FILE = re.compile(r"ledger-(\d{20})-(\d{4})-([0-9a-f]{16})\.parquet")


@final
@attrs.frozen
class LakeLedger:
    """An offloaded ledger as the log's metadata records it."""

    ledger_id: int
    #: The data files (full URIs), in log order: one per day of the records' timestamps.
    files: tuple[str, ...]
    records: int
    #: Entries of the ledger (its last entry id + 1) and their payload bytes on the bookies.
    entries: int
    size: int
    #: Bytes of the data files.
    lake_bytes: int
    #: The records' smallest and greatest timestamps (ms; None: no record has one).
    min_ts: int | None
    max_ts: int | None
    #: When the metadata recorded the offload (wall-clock ms; 0 without a clock).
    time_ms: int = 0
    #: Whether the bookies' copy was deleted.
    bookies_deleted: bool = False
    #: When the ledger was created (wall-clock ms, from its metadata; what retention by age
    #: needs of it once the bookies' copy is gone).
    ctime_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "ledger_id": self.ledger_id,
            "files": list(self.files),
            "records": self.records,
            "entries": self.entries,
            "size": self.size,
            "lake_bytes": self.lake_bytes,
            "min_ts": self.min_ts,
            "max_ts": self.max_ts,
            "time_ms": self.time_ms,
            "ctime_ms": self.ctime_ms,
        }
        if self.bookies_deleted:
            doc["bookies_deleted"] = True
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LakeLedger:
        files = doc["files"]
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise TypeError("files must be a list of strings")
        found = cls(
            ledger_id=_int(doc["ledger_id"]),
            files=tuple(files),
            records=_int(doc["records"]),
            entries=_int(doc["entries"]),
            size=_int(doc["size"]),
            lake_bytes=_int(doc["lake_bytes"]),
            min_ts=_opt_int(doc.get("min_ts")),
            max_ts=_opt_int(doc.get("max_ts")),
            time_ms=_int(doc.get("time_ms", 0)),
            bookies_deleted=_bool(doc.get("bookies_deleted", False)),
            ctime_ms=_int(doc.get("ctime_ms", 0)),
        )
        found.check()
        return found

    def check(self) -> None:
        if min(self.ledger_id, self.records, self.entries, self.size, self.lake_bytes) < 0:
            raise InvalidMetadataError(f"bad offload record {self}")
        if self.records and not self.files:
            raise InvalidMetadataError(f"offloaded ledger {self.ledger_id}: records but no files")
        if (self.min_ts is None) != (self.max_ts is None) or (
            self.min_ts is not None and self.max_ts is not None and self.min_ts > self.max_ts
        ):
            raise InvalidMetadataError(f"offloaded ledger {self.ledger_id}: bad time range")


@final
@attrs.frozen
class LakeUri:
    """Where a lake lives: ``scheme`` (``file`` or ``s3``) and the root (a local directory,
    or ``bucket/prefix``)."""

    scheme: str
    root: str

    def __str__(self) -> str:
        return f"file://{self.root}" if self.scheme == "file" else f"s3://{self.root}"

    def join(self, *parts: str) -> str:
        return "/".join((str(self).rstrip("/"), *parts))


def parse_lake_uri(value: object) -> LakeUri:
    """``file:///abs/dir`` or ``s3://bucket/prefix``; ConfigurationError otherwise."""
    if not isinstance(value, str):
        raise ConfigurationError(f"log option offload_to must be a URI string, not {value!r}")
    parsed = urllib.parse.urlsplit(value)
    if parsed.query or parsed.fragment:
        raise ConfigurationError(f"offload_to {value!r}: no query or fragment, please")
    if parsed.scheme == "file":
        if parsed.netloc or not parsed.path.startswith("/"):
            raise ConfigurationError(
                f"offload_to {value!r}: a file lake is file:///absolute/dir (three slashes)"
            )
        return LakeUri("file", parsed.path.rstrip("/") or "/")
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigurationError(f"offload_to {value!r}: s3://bucket/prefix needs a bucket")
        return LakeUri("s3", (parsed.netloc + parsed.path).rstrip("/"))
    raise ConfigurationError(
        f"offload_to {value!r}: give file:///absolute/dir or s3://bucket/prefix"
    )


def table_name(log_name: str) -> str:
    """The Iceberg table of a log. Iceberg identifiers split at dots and SQL engines want
    ``-`` quoted, so: a name of ``A-Z a-z 0-9 _`` that does not start with ``x_`` is the
    table's name as it is; any other name is written with ``.``, ``-`` and ``_`` as
    ``_2e_``, ``_2d_`` and ``_5f_`` (their hex codes) after an ``x_`` prefix. Only escaped
    names start with ``x_``, so no two logs share a table (``orders.v2`` ->
    ``x_orders_2e_v2``)."""
    if re.fullmatch(r"[A-Za-z0-9_]+", log_name) and not log_name.startswith("x_"):
        return log_name
    escaped = "".join(f"_{ord(c):02x}_" if c in "._-" else c for c in log_name)
    return f"x_{escaped}"


def data_file_name(ledger_id: int, part: int, token: str) -> str:
    """A data file's name: the ledger id (so that files of a ledger are found by name), the
    part (one per day of timestamps, in log order) and a random token of 16 hex digits (so that
    two offloaders of one ledger never write the same object)."""
    if not re.fullmatch(r"[0-9a-f]{16}", token):
        raise ValueError(f"bad token {token!r}")
    return f"ledger-{ledger_id:020d}-{part:04d}-{token}.parquet"


def lake_of_file(uri: str) -> str:
    """The lake (``offload_to``) of a data file the log's metadata records: files live at
    ``<offload_to>/<table>/data/<file>``."""
    return uri.rsplit("/", 3)[0]


#: Catalog property names whose values are secrets (pyiceberg's ``s3.secret-access-key``,
#: ``s3.session-token``, ``token``, ``credential``, ``rest.sigv4``'s keys, a password).
_SECRET_KEY = re.compile(r"secret|password|passwd|token|credential|key|session|signature", re.I)
#: The password of a URL's userinfo (``postgresql://user:PASSWORD@host/db``).
_URL_PASSWORD = re.compile(r"(?<=://)[^/@:\s]*:([^/@\s]+)@")


def redact(text: str, properties: Mapping[str, str] | None) -> str:
    """``text`` (an error's message) without the secrets of the catalog ``properties``: the
    values of properties named like secrets, and passwords in URLs, as ``***``."""
    secrets = set()
    for key, value in (properties or {}).items():
        if _SECRET_KEY.search(key) and len(value) >= 3:
            secrets.add(value)
        secrets.update(m.group(1) for m in _URL_PASSWORD.finditer(value))
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return _URL_PASSWORD.sub(lambda m: m.group(0).replace(m.group(1), "***"), text)


def ledger_id_of_file(path: str) -> int | None:
    """The ledger id of a data file walkit named (None: not one of walkit's names)."""
    found = _FILE.fullmatch(path.rsplit("/", 1)[-1])
    return None if found is None else int(found.group(1))


def to_offload(
    listed: Sequence[tuple[int, int]],
    closed: Mapping[int, int],
    offloaded: Iterable[int],
    *,
    closed_at_ms: Mapping[int, int] | None = None,
    now_ms: int | None = None,
    after: float | None = None,
) -> list[int]:
    """Ledger ids to offload now, in log order: of the ``listed`` (seq, ledger id) pairs, those
    ``closed`` (ledger id -> entries, > 0) and not ``offloaded``, never the last listed one
    (the writer's). With ``after`` (seconds), only ledgers closed that long before ``now_ms``
    (``closed_at_ms``: when each closed, else when it was created)."""
    done = set(offloaded)
    found: list[int] = []
    for _seq, ledger_id in listed[:-1]:
        if ledger_id in done or closed.get(ledger_id, 0) <= 0:
            continue
        if after is not None and now_ms is not None and closed_at_ms is not None:
            at = closed_at_ms.get(ledger_id)
            if at is None or now_ms - at < after * 1000:
                continue
        found.append(ledger_id)
    return found


def to_delete_from_bookies(
    offloaded: Iterable[LakeLedger],
    keep: Iterable[int],
    *,
    now_ms: int | None,
    lag: float,
) -> list[int]:
    """Offloaded ledgers whose bookie copy may go now: committed ``lag`` seconds before
    ``now_ms`` (without a clock, only with ``lag`` 0), not deleted yet, and not among ``keep``
    (the ledgers a takeover fences: it needs their bookie copies)."""
    kept = set(keep)
    found = []
    for lake in offloaded:
        if lake.bookies_deleted or lake.ledger_id in kept:
            continue
        if lag > 0 and (now_ms is None or now_ms - lake.time_ms < lag * 1000):
            continue
        found.append(lake.ledger_id)
    return found


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _opt_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {value!r}")
    return value
