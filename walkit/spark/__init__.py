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

from walkit.spark._connect import CONF_PREFIX, session_options
from walkit.spark._source import PUSHDOWN_CONF, WalkitDataSource, source_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CONF_PREFIX", "PUSHDOWN_CONF", "WalkitDataSource", "register"]


def register(spark: SparkSession, *, push_filters: bool | None = None) -> None:
    """Register the data source with ``spark`` under the format name ``"walkit"``.

    Filters on ``ledger_seq``/``position`` are pushed down into the read when the session's
    ``spark.sql.python.filterPushdown.enabled`` is true at registration (Spark refuses a
    source that takes filters otherwise); ``push_filters`` overrides what the conf says.

    The connection options in the session's conf (``spark.walkit.metadata``,
    ``spark.walkit.tls.ca``, ``spark.walkit.token``, ...: see docs/spark.md) are read here too,
    and every query's own options win over them: Spark does not hand a Python data source the
    session's conf, so register again after changing them. ConfigurationError for an unknown
    ``spark.walkit.*`` key, and for a secret (``spark.walkit.token``,
    ``spark.walkit.password``) set on the running session rather than when the application
    started (Spark would show it, unredacted, in the properties of its jobs).
    """
    conf: dict[str, str] = spark.conf.getAll
    if push_filters is None:
        value = conf.get(PUSHDOWN_CONF, "false")
        push_filters = str(value).strip().lower() == "true"
    session = session_options(conf, _startup_keys(spark))
    spark.dataSource.register(source_class(push_filters, session))


def _startup_keys(spark: SparkSession) -> set[str] | None:
    """The keys of the SparkConf the application started with (None under Spark Connect,
    whose client does not see it)."""
    try:
        context = spark.sparkContext
    except Exception:  # pyspark raises its own error types for a Connect session
        return None
    return {key for key, _ in context.getConf().getAll()}
