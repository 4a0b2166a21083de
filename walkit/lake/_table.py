"""The log's Iceberg table: its catalog, schema and partitioning, and the lake's file I/O.

Every log that offloads has one table, ``walkit.<table_name(log)>``
(:func:`walkit._core.lake.table_name`), partitioned by ``day(timestamp)``, at
``<offload_to>/<table>``. Its columns are the Spark reader's (``walkit.spark``), less the
ones a file does not need (``log``, ``position``: the table is the log's, and the position is
``ledger_seq:entry_id:slot``), with each record's ``producer`` tag, and a typed log's
``value`` (:mod:`walkit.lake._columns`).

The catalog is any pyiceberg catalog, given by its properties (``offload_catalog``); without
one, a ``file://DIR`` lake keeps a SQL catalog in ``DIR/catalog.db`` (SQLite). Files are
read and written through pyiceberg's ``PyArrowFileIO``, that is pyarrow's filesystems (local,
S3 with the standard AWS credential chain): one object-store library for the table, the
offloader and the readers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    BinaryType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from walkit._core.lake import LAKE_FORMAT, NAMESPACE, LakeUri, parse_lake_uri, table_name
from walkit.errors import ConfigurationError
from walkit.lake._durable import DURABLE_IO_IMPL

__all__ = ["ARROW_SCHEMA", "BASE_SCHEMA", "ICEBERG_SCHEMA", "PRODUCER_FIELD", "Lake", "lake_of"]

#: The columns of lake format 1 (field ids 1-11): what a table is created with. Later
#: columns are added to it by schema evolution (:func:`walkit.lake._columns.table_columns`),
#: so that a table created by any version of walkit gets the same ids for them.
BASE_SCHEMA: Final = Schema(
    NestedField(1, "ledger_seq", LongType(), required=True),
    NestedField(2, "ledger_id", LongType(), required=True),
    NestedField(3, "entry_id", LongType(), required=True),
    NestedField(4, "slot", LongType(), required=True),
    NestedField(5, "timestamp", TimestamptzType(), required=False),
    NestedField(6, "key", BinaryType(), required=False),
    NestedField(
        7,
        "headers",
        ListType(
            9,
            StructType(
                NestedField(10, "key", StringType(), required=False),
                NestedField(11, "value", BinaryType(), required=False),
            ),
            element_required=False,
        ),
        required=False,
    ),
    NestedField(8, "payload", BinaryType(), required=True),
)
#: Lake format 2's column: the record's idempotent-producer tag (null: none), ids 12-14.
PRODUCER_FIELD: Final = NestedField(
    12,
    "producer",
    StructType(
        NestedField(13, "producer_id", StringType(), required=False),
        NestedField(14, "sequence", LongType(), required=False),
    ),
    required=False,
)
#: The columns of every table of this lake format; a typed log's table also has ``value``,
#: a struct of its schema's fields (ids assigned by Iceberg as the schema evolves).
ICEBERG_SCHEMA: Final = Schema(*BASE_SCHEMA.fields, PRODUCER_FIELD)
PARTITION_SPEC: Final = PartitionSpec(
    PartitionField(source_id=5, field_id=1000, transform=DayTransform(), name="timestamp_day")
)


def _field(name: str, type_: pa.DataType, field_id: int, nullable: bool) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={"PARQUET:field_id": str(field_id)})


#: The data files' Arrow schema, with Iceberg's field ids (so that any Iceberg reader maps the
#: columns by id, not by name); a typed log's files add ``value`` (``walkit.lake._columns``).
ARROW_SCHEMA: Final = pa.schema(
    [
        _field("ledger_seq", pa.int64(), 1, False),
        _field("ledger_id", pa.int64(), 2, False),
        _field("entry_id", pa.int64(), 3, False),
        _field("slot", pa.int64(), 4, False),
        _field("timestamp", pa.timestamp("us", tz="UTC"), 5, True),
        _field("key", pa.binary(), 6, True),
        _field(
            "headers",
            pa.list_(
                _field(
                    "element",
                    pa.struct(
                        [
                            _field("key", pa.string(), 10, True),
                            _field("value", pa.binary(), 11, True),
                        ]
                    ),
                    9,
                    True,
                )
            ),
            7,
            True,
        ),
        _field("payload", pa.binary(), 8, False),
        _field(
            "producer",
            pa.struct(
                [
                    _field("producer_id", pa.string(), 13, True),
                    _field("sequence", pa.int64(), 14, True),
                ]
            ),
            12,
            True,
        ),
    ]
)


class Lake:
    """One log's lake: its URI, catalog properties, table and file I/O (made when first
    needed; pyiceberg's calls block, so callers run them in a worker thread)."""

    def __init__(self, log_name: str, uri: LakeUri, catalog: Mapping[str, str] | None) -> None:
        self.log_name = log_name
        self.uri = uri
        self.table_name = table_name(log_name)
        self.identifier = (NAMESPACE, self.table_name)
        #: Whether the catalog is the default one, in the lake's directory.
        self.default_catalog = catalog is None
        if catalog is None:
            if uri.scheme != "file":
                raise ConfigurationError(
                    f"log {log_name}: an {uri.scheme}:// lake needs offload_catalog (the "
                    "properties of a pyiceberg catalog: REST, SQL, Glue, Hive)"
                )
            catalog = {
                "type": "sql",
                "uri": f"sqlite:///{uri.root}/catalog.db",
                "warehouse": str(uri),
            }
        self.properties: dict[str, str] = dict(catalog)

    @property
    def location(self) -> str:
        """The table's location: ``<offload_to>/<table>``."""
        return self.uri.join(self.table_name)

    @property
    def data_dir(self) -> str:
        return self.uri.join(self.table_name, "data")

    @functools.cached_property
    def io(self) -> FileIO:
        """The lake's file I/O, without the catalog (what readers need)."""
        return load_file_io(self.properties, self.location)

    @functools.cached_property
    def catalog(self) -> Catalog:
        if self.default_catalog:  # (its SQLite file goes in the lake's directory)
            import pathlib

            pathlib.Path(self.uri.root).mkdir(parents=True, exist_ok=True)
        properties = self.properties
        if self.uri.scheme == "file" and "py-io-impl" not in properties:
            # The tables' own metadata writes (pyiceberg's) are fsynced: walkit.lake._durable.
            properties = {**properties, "py-io-impl": DURABLE_IO_IMPL}
        return load_catalog("walkit", **properties)

    def table(self, *, create: bool = True) -> Table | None:
        """The log's table, loaded afresh (created when missing with ``create``; else None)."""
        from pyiceberg.exceptions import NoSuchTableError

        catalog = self.catalog
        try:
            return catalog.load_table(self.identifier)
        except NoSuchTableError:
            if not create:
                return None
        try:
            catalog.create_namespace(NAMESPACE)
        except NamespaceAlreadyExistsError:
            pass
        except Exception:  # a race lost in the catalog's own store (a SQL unique key)
            if (NAMESPACE,) not in catalog.list_namespaces():
                raise
        try:
            return catalog.create_table(
                self.identifier,
                schema=BASE_SCHEMA,
                partition_spec=PARTITION_SPEC,
                location=self.location,
                properties=_TABLE_PROPERTIES,
            )
        except TableAlreadyExistsError:
            return catalog.load_table(self.identifier)
        except Exception:  # (the same race, for the table)
            if not catalog.table_exists(self.identifier):
                raise
            return catalog.load_table(self.identifier)


_TABLE_PROPERTIES: Final[dict[str, Any]] = {
    "walkit.lake-format": str(LAKE_FORMAT),
    "write.parquet.compression-codec": "zstd",
    "format-version": "2",
    # A commit that lost a race must fail, not be rebased onto the winner's snapshot by
    # pyiceberg: the offloader decides again from a fresh read (the winner may have committed
    # the same ledger).
    "commit.retry.num-retries": "0",
}


def lake_of(
    log_name: str, offload_to: str | None, catalog: Mapping[str, str] | None
) -> Lake | None:
    """The lake of a log handle's ``offload_to`` and ``offload_catalog`` options (None: it
    does not offload); one per log, lake and catalog in a process (a catalog holds
    connections)."""
    if offload_to is None:
        return None
    return _lake(log_name, offload_to, None if catalog is None else tuple(catalog.items()))


@functools.lru_cache(maxsize=64)
def _lake(log_name: str, uri: str, catalog: tuple[tuple[str, str], ...] | None) -> Lake:
    return Lake(log_name, parse_lake_uri(uri), None if catalog is None else dict(catalog))
