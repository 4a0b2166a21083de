"""The error hierarchy's export list stays complete (it is literal so that type checkers read it)."""

from __future__ import annotations

import walkit
from walkit import errors


def test_all_names_every_error_class_and_nothing_else() -> None:
    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.WalkitError)
    }
    assert set(errors.__all__) == classes | {"error_for_code"}
    assert len(errors.__all__) == len(set(errors.__all__))


def test_every_error_is_reexported_at_the_top_level() -> None:
    for name in errors.__all__:
        assert getattr(walkit, name) is getattr(errors, name)
        assert name in walkit.__all__
