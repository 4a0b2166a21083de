"""Bad options of the read forms: one clear error naming the option, before any task runs."""

from __future__ import annotations

from typing import Any

import pytest


def _error(action: Any) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def test_missing_metadata(spark: Any) -> None:
    text = _error(lambda: spark.read.format("walkit").load("orders").collect())
    assert 'the option "metadata" is required' in text
