"""The ``walkit`` data source: Spark's entry point, which hands out readers and writers.

Spark creates the data source in a Python process of its own (on the driver for planning, on
the executors for reading), from the options of the query; everything here must pickle. The
readers live in ``_read*.py``, the writers in ``_write.py``; this module only picks one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSource

from walkit.errors import ConfigurationError
from walkit.spark._connect import SessionOptions
from walkit.spark._options import read_options

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

__all__ = ["PUSHDOWN_CONF", "WalkitDataSource", "source_class"]

#: The Spark conf that lets a Python data source take filters.
PUSHDOWN_CONF: Final = "spark.sql.python.filterPushdown.enabled"


class WalkitDataSource(DataSource):
    """Logs and ledgers of a walkit cluster as a Spark data source (format ``"walkit"``).

    A path names a log (``.load("orders")``); the option ``ledgers`` instead reads raw ledgers.
    """

    #: Whether batch readers take filters (see :func:`walkit.spark.register`).
    push_filters: bool = False
    #: The connection options of the session's ``spark.walkit.*`` conf when the format was
    #: registered (the planner processes that create the source do not see the conf).
    session: SessionOptions = SessionOptions()

    @classmethod
    def name(cls) -> str:
        return "walkit"

    def schema(self) -> StructType | str:
        from walkit.spark._read_schema import LEDGER_SCHEMA, LOG_SCHEMA

        ledgers = any(str(key).lower() == "ledgers" for key in self.options)
        if ledgers:
            return LEDGER_SCHEMA
        # A typed log has one more column: its values (walkit.spark._values). (The other
        # options are checked by the reader.)
        from walkit.spark._connect import connection
        from walkit.spark._options import READ_OPTIONS, check_options, log_name
        from walkit.spark._values import latest, log_versions, value_ddl

        options = self.session.merged(check_options(self.options, READ_OPTIONS, "read"))
        name = log_name(options)
        if name is None:
            return LOG_SCHEMA
        found = latest(log_versions(connection(options), name) or ())
        return LOG_SCHEMA if found is None else f"{LOG_SCHEMA}, {value_ddl(found[1])}"

    def reader(self, schema: StructType) -> DataSourceReader:
        options = read_options(self.options, streaming=False, session=self.session)
        _check_schema(schema, ledgers=options.ledgers is not None)
        if options.ledgers is not None:
            from walkit.spark._read_ledgers import LedgersReader

            return LedgersReader(options)
        from walkit.spark._read_log import FilteringLogReader, LogReader

        values = _value_column(options, schema)
        if self.push_filters:
            return FilteringLogReader(options, values)
        return LogReader(options, values)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from walkit.spark._read_stream import LogStreamReader

        options = read_options(self.options, streaming=True, session=self.session)
        _check_schema(schema, ledgers=False)
        reader: DataSourceStreamReader = LogStreamReader(options, _value_column(options, schema))
        return reader

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        # The write side lives in walkit.spark._write (imported only when a query writes).
        write = importlib.import_module("walkit.spark._write")
        writer: DataSourceWriter = write.batch_writer(
            dict(self.options), schema, overwrite, self.session
        )
        return writer

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        write = importlib.import_module("walkit.spark._write")
        writer: DataSourceStreamWriter = write.stream_writer(
            dict(self.options), schema, overwrite, self.session
        )
        return writer


def _check_schema(given: StructType, *, ledgers: bool) -> None:
    """A read's columns are fixed: refuse a schema given with ``.schema(...)`` that differs."""
    from walkit.spark._read_schema import LEDGER_ARROW, LOG_ARROW

    expected = list((LEDGER_ARROW if ledgers else LOG_ARROW).names)
    names = [field.name for field in given.fields]
    if not ledgers and names == [*expected, "value"]:
        return  # a typed log's (walkit.spark._values)
    if names != expected:
        raise ConfigurationError(
            f"walkit: a read has the fixed columns {', '.join(expected)}; the schema given "
            f"has {', '.join(names)} (leave out .schema(...))"
        )


def _value_column(options: Any, given: StructType) -> Any:
    """The ValueColumn of a log read whose schema has ``value`` (None: it has not)."""
    names = [field.name for field in given.fields]
    if "value" not in names:
        return None
    from walkit.spark._values import read_value_column

    return read_value_column(options.connection, options.log, given.fields[-1].dataType)


class _PushdownWalkitDataSource(WalkitDataSource):
    """The same source, with filter pushdown (needs :data:`PUSHDOWN_CONF` on)."""

    push_filters = True

    @classmethod
    def name(cls) -> str:
        return "walkit"


def source_class(push_filters: bool, session: SessionOptions | None = None) -> type[Any]:
    """The data source class to register: with ``session`` options, a subclass that holds
    them (Spark pickles it by value to the processes that create the source)."""
    base = _PushdownWalkitDataSource if push_filters else WalkitDataSource
    if session is None or not session.values:
        return base
    return type(base.__name__, (base,), {"session": session, "__module__": base.__module__})
