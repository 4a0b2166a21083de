"""``walkit log schema NAME [--json]`` and ``walkit log tail`` on a typed log, run as a user
would (a subprocess) against in-process bookies on sqlite metadata."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tests.client.conftest import cluster, connect
from tests.log.test_cli_log import walkit
from walkit import Log


@dataclasses.dataclass
class Order:
    id: int
    user: str
    raw: bytes = b""


@dataclasses.dataclass
class OrderV2:
    id: int
    user: str
    raw: bytes = b""
    tags: list[str] = dataclasses.field(default_factory=list)
    note: str | None = None


async def test_schema_and_tail_of_a_typed_log(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    async with cluster(url, tmp_path, 3), connect(url) as client:
        async with Log.open(client, "orders") as plain, plain.writer() as w:
            await w.append(b"before the schema")
        async with Log.open(client, "orders", schema=Order) as v1, v1.writer() as w:
            await w.append(Order(1, "ann", b"\x00\xff"), key=b"ann")
        async with Log.open(client, "orders", schema=OrderV2) as v2, v2.writer() as w:
            await w.append(OrderV2(2, "bob", tags=["x", "y"]))
        await Log.open(client, "untyped")

        listed = await walkit(url, "log", "schema", "orders", "--json")
        assert listed.returncode == 0, listed.stderr
        versions = json.loads(listed.stdout)
        assert [v["version"] for v in versions] == [1, 2]
        assert versions[1]["schema"]["fields"][3] == {
            "name": "tags",
            "type": {"type": "array", "items": "string"},
            "default": [],
        }
        assert versions[0]["compatibility"] == "backward"
        table = await walkit(url, "log", "schema", "orders")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.decode().splitlines()
        assert lines[0].split()[:5] == [
            "VERSION",
            "REGISTERED",
            "COMPATIBILITY",
            "RECORD",
            "LEDGERS",
        ]
        assert "tags: array<string>, note: string?" in lines[2]
        none = await walkit(url, "log", "schema", "untyped")
        assert none.returncode == 0 and b"has no schema" in none.stdout

        tail = await walkit(url, "log", "tail", "orders", "--json")
        assert tail.returncode == 0, tail.stderr
        legacy, first, second = [json.loads(line) for line in tail.stdout.splitlines()]
        assert legacy["schema_version"] is None and legacy["value"] is None
        assert legacy["payload"] == "before the schema"
        assert first["schema_version"] == 1
        assert first["value"] == {"id": 1, "user": "ann", "raw": "AP8="}  # bytes: base64
        assert first["key"] == "ann"
        assert second["value"] == {
            "id": 2,
            "user": "bob",
            "raw": "",
            "tags": ["x", "y"],
            "note": None,
        }
        human = await walkit(url, "log", "tail", "orders")
        assert human.returncode == 0, human.stderr
        rows = human.stdout.decode().splitlines()
        assert rows[0].split()[-1] == "VALUE"
        assert rows[2].endswith('{"id": 1, "user": "ann", "raw": "AP8="}')
        assert rows[1].endswith("before the schema")

        shown = await walkit(url, "log", "show", "orders", "--json")
        assert shown.returncode == 0, shown.stderr
        assert [lg["schema"] for lg in json.loads(shown.stdout)["ledgers"]] == [None, 1, 2]
        plain_show = await walkit(url, "log", "show", "untyped", "--json")
        assert "schema" not in plain_show.stdout.decode()  # a plain log's output is unchanged

        missing = await walkit(url, "log", "schema", "nope")
        assert missing.returncode != 0 and b"no log named 'nope'" in missing.stderr
