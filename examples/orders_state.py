"""The state both order services keep: orders by id, built by applying the log's records.

A record is the JSON ``{"id": ..., "order": {...}}`` of one accepted order. Applying is
idempotent (an order id seen again keeps its first copy), so a replay from any point is
safe. Pure: the services move the bytes and decide when to apply.
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any, final

from walkit import LogPosition

__all__ = ["Orders", "check_order", "encode"]

#: Largest order body accepted, in bytes.
MAX_ORDER = 16 * 1024


def argument_parser(description: str) -> argparse.ArgumentParser:
    """The options both order services take (each adds its server's own)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--metadata", required=True, help="the cluster's metadata URL")
    parser.add_argument("--http", required=True, metavar="HOST:PORT")
    parser.add_argument("--log", default="orders", help="the log's name (default: orders)")
    parser.add_argument("--lease-timeout", type=float, default=2.0, metavar="SECONDS")
    return parser


def check_order(body: object) -> dict[str, Any]:
    """The order in a request body, or ValueError saying what is wrong with it."""
    if not isinstance(body, dict) or not body:
        raise ValueError("an order is a non-empty JSON object")
    if len(json.dumps(body)) > MAX_ORDER:
        raise ValueError(f"an order takes at most {MAX_ORDER} bytes of JSON")
    return body


def encode(order: dict[str, Any]) -> tuple[str, bytes]:
    """A new order id and the record that accepts the order under it."""
    order_id = uuid.uuid4().hex
    return order_id, json.dumps({"id": order_id, "order": order}, sort_keys=True).encode()


@final
class Orders:
    """Orders by id, and the position of the last record applied."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[str, Any]] = {}
        self.applied: LogPosition | None = None

    def apply(self, position: LogPosition, payload: bytes) -> None:
        try:
            doc = json.loads(payload)
            order_id, order = doc["id"], doc["order"]
        except (ValueError, KeyError, TypeError):
            order_id = None  # not an order: skipped, but applied past
        if isinstance(order_id, str):
            self.by_id.setdefault(order_id, order)
        self.applied = position

    def has_applied(self, position: LogPosition) -> bool:
        return self.applied is not None and self.applied >= position

    def status(self, role: str, leader: str | None, *, writing: bool) -> dict[str, Any]:
        return {
            "role": role,
            "leader": leader,
            "writing": writing,
            "applied": None if self.applied is None else str(self.applied),
            "orders": len(self.by_id),
        }
