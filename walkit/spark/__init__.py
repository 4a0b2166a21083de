"""``walkit.spark``: a PySpark data source for walkit logs and ledgers (the extra
``walkit[spark]``: pyspark >= 4.0 and pyarrow).

::

    import walkit.spark
    walkit.spark.register(spark)
    df = spark.read.format("walkit").option("metadata", URL).load("orders")

See docs/spark.md for the forms, the schemas and the options.
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"walkit.spark needs pyspark >= 4.0 and pyarrow: install the extra walkit[spark] "
        f"(pip install 'walkit[spark]'); {exc}"
    ) from exc

from typing import TYPE_CHECKING

from walkit.spark._source import PUSHDOWN_CONF, WalkitDataSource, source_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PUSHDOWN_CONF", "WalkitDataSource", "register"]


def register(spark: SparkSession, *, push_filters: bool | None = None) -> None:
    """Register the data source with ``spark`` under the format name ``"walkit"``.

    Filters on ``ledger_seq``/``position`` are pushed down into the read when the session's
    ``spark.sql.python.filterPushdown.enabled`` is true at registration (Spark refuses a
    source that takes filters otherwise); ``push_filters`` overrides what the conf says.
    """
    if push_filters is None:
        value = spark.conf.get(PUSHDOWN_CONF, "false")
        push_filters = str(value).strip().lower() == "true"
    spark.dataSource.register(source_class(push_filters))
