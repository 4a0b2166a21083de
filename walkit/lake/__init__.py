"""The lake: a log's closed ledgers offloaded to Parquet files of an Apache Iceberg table
(the ``lake`` extra: pyiceberg, pyarrow). See ``docs/lake.md``.

The decisions are :mod:`walkit._core.lake`; this package moves the bytes: it writes a ledger's
records as Parquet files (:mod:`._write`) with the table's columns (:mod:`._columns`),
commits them to the log's table (:mod:`._table`), records them in the log's metadata and
deletes the bookies' copy (:mod:`._offload`), reads them back for the log's readers
(:mod:`._read`) and removes them with retention (:mod:`._drop`).
"""

from __future__ import annotations

import importlib.util

from walkit.errors import ConfigurationError

__all__ = ["check_available"]

#: What ``offload_to`` needs installed.
_NEEDED = ("pyiceberg", "pyarrow", "sqlalchemy")


def check_available() -> None:
    """Raise ConfigurationError in one line naming what to install when the lake extra is
    missing."""
    missing = [name for name in _NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(
            f"offload_to needs {', '.join(missing)}: pip install 'walkit[lake]'"
        )
