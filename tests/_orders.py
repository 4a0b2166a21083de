"""The typed records the log and lake tests write: an order, and its next version with two
fields added with defaults (backward and forward compatible)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class OrderV1:
    id: int
    user: str
    amount: float


@dataclasses.dataclass
class OrderV2:
    id: int
    user: str
    amount: float
    region: str = "eu"
    tags: list[str] = dataclasses.field(default_factory=list)
