"""Autorecovery tests reuse the client tests' in-process cluster fixture."""

from tests.client.conftest import memory_url

__all__ = ["memory_url"]
