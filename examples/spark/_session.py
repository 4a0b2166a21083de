"""What the Spark examples share: a SparkSession with the ``walkit`` format registered, and
shipping an example's own functions to the executors."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def session(master: str, name: str) -> tuple[Any, bool]:
    """The active SparkSession (a test's, say), or a new local one; the flag says whether the
    caller made it (and should stop it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import walkit.spark

    active = SparkSession.getActiveSession()
    if active is not None:
        walkit.spark.register(active)
        return active, False
    spark = (
        SparkSession.builder.master(master)
        .appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    walkit.spark.register(spark)
    return spark, True


def by_value(*modules: str) -> None:
    """Ship these modules' functions and classes to the executors by value: they are run or
    imported from examples/, which the executors cannot import."""
    from pyspark import cloudpickle

    for name in modules:
        module = sys.modules.get(name)
        if module is not None and name != "__main__":
            cloudpickle.register_pickle_by_value(module)


def cli_parser(doc: str, password_help: str) -> argparse.ArgumentParser:
    """A parser with what every example takes: ``--metadata`` (default $WALKIT_METADATA),
    ``--password`` (default: the one stored with the log) and ``--master``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument(
        "--metadata",
        default=os.environ.get("WALKIT_METADATA"),
        help="metadata URL (default: $WALKIT_METADATA)",
    )
    p.add_argument("--password", default=None, help=password_help)
    p.add_argument("--master", default="local[2]", help="Spark master of a new session")
    return p


def cli_parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; a missing metadata URL is a usage error."""
    args = p.parse_args(argv)
    if not args.metadata:
        p.error("--metadata URL is required (or set WALKIT_METADATA)")
    return args
