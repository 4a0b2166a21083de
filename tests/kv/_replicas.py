"""KV service replicas (``examples/kv_store.py serve``) as real processes on loopback."""

from __future__ import annotations

import sys
from pathlib import Path

from tests._cluster import ChildProcess

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kv_store.py"


class ReplicaProcess(ChildProcess):
    """One replica; keeps its HTTP port across restarts."""

    ready_text = "kv: serving http://"
    kind = "replica"

    def __init__(self, metadata_url: str, port: int, *extra: str, log: str = "kv") -> None:
        super().__init__(port)
        self.metadata_url = metadata_url
        self.extra = list(extra)
        self.log = log

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def base(self) -> str:
        return f"http://{self.address}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            str(EXAMPLE),
            "serve",
            "--metadata",
            self.metadata_url,
            "--http",
            self.address,
            "--log",
            self.log,
            *self.extra,
        ]

    def start(self, timeout: float = 60.0) -> None:
        super().start(timeout)
