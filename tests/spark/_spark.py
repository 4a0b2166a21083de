"""Whether Spark can run here, and what a Spark test does when it cannot: skip with the
reason, except in CI (``CI=true``) where it is a failure (the test script installs Spark)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess

import pytest


def _java_major() -> int:
    java = shutil.which("java")
    if java is None:
        return 0
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    for line in out.stderr.splitlines():
        if "version" in line and '"' in line:
            text = line.split('"')[1]
            head = text.split(".")[0]
            if head == "1":  # 1.8.0_x
                head = text.split(".")[1]
            return int(head) if head.isdigit() else 0
    return 0


def missing_spark(java: bool = True) -> str | None:
    """Why Spark cannot run here, or None."""
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (bash scripts/setup.sh dev,spark)"
    major = _java_major()
    if java and major < 17:
        return (
            f"Spark 4 needs Java 17 or newer on PATH, found {major or 'none'} "
            "(bash scripts/install-zookeeper.sh)"
        )
    return None


def require_spark(*, java: bool = True) -> None:
    """Fail (CI) or skip (elsewhere) the calling test, or module when called at import."""
    problem = missing_spark(java)
    if problem is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI runs the Spark tests: {problem}", pytrace=False)
    pytest.skip(problem, allow_module_level=True)
