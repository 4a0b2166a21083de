"""The ``spark`` extra installs what Spark's Arrow path needs (pandas and pyarrow): a Python
UDF in the shared session is Arrow-optimized, without Spark's warning that it falls back
("Arrow optimization failed to enable because PyArrow or Pandas is not installed") or any
other warning about pandas or Arrow."""

from __future__ import annotations

import warnings
from typing import Any


def test_python_udfs_take_the_arrow_path_without_a_warning(spark: Any) -> None:
    from pyspark.sql import functions as F
    from pyspark.util import PythonEvalType

    # Spark 4 turns Arrow on for Python UDFs by default; the session keeps the default.
    assert spark.conf.get("spark.sql.execution.pythonUDF.arrow.enabled") == "true"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shout = F.udf(lambda s: s.upper(), "string")
        rows = spark.createDataFrame([("a",), ("b",)], "s string").select(shout("s")).collect()
    assert_no_arrow_warning(caught)
    assert shout.evalType == PythonEvalType.SQL_ARROW_BATCHED_UDF
    assert [row[0] for row in rows] == ["A", "B"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = spark.range(3).toPandas()
    assert_no_arrow_warning(caught)
    assert list(frame["id"]) == [0, 1, 2]


def assert_no_arrow_warning(caught: list[warnings.WarningMessage]) -> None:
    texts = [f"{w.category.__name__}: {w.message}" for w in caught]
    assert not [t for t in texts if "arrow" in t.lower() or "pandas" in t.lower()], texts
