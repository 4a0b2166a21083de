"""Fixtures of the hostile-input tests."""

from tests.client.conftest import memory_url

__all__ = ["memory_url"]
