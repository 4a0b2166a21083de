"""Metadata URLs: parsing, options, and failures that must be quick and clear."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests._zookeeper import free_port
from walkit.errors import ConfigurationError, MetadataStoreError
from walkit.metadata import open_metadata_store
from walkit.metadata._sqlite import SqliteMetadataStore


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "expected zk://"),
        ("/tmp/m.db", "expected zk://"),
        ("etcd://127.0.0.1:2379/x", "expected zk://"),
        ("sqlite://relative/path.db", "absolute path"),
        ("sqlite:relative.db", "expected zk://"),
        ("sqlite:///", "names no file"),
        ("sqlite:///tmp/dir/", "names no file"),
        ("memory://", "needs a name"),
        ("zk:///walkit", "needs host:port"),
        ("zk://:2181/walkit", "missing host"),
        ("zk://127.0.0.1:notaport/walkit", "bad port"),
        ("zk://127.0.0.1:70000/walkit", "bad port"),
        ("zk://127.0.0.1:/walkit", "bad port"),
        ("zk://a:1,,b:2/walkit", "missing host"),
        ("zk://[::1/walkit", "IPv6"),
        ("zk://127.0.0.1:2181", "root path"),
        ("zk://127.0.0.1:2181/", "root path"),
        ("zk://127.0.0.1:2181/a//b", "root"),
        ("sqlite:///tmp/m.db?session_timeout=abc", "not a number"),
        ("sqlite:///tmp/m.db?colour=blue", "unknown option"),
        ("memory://x?session_timeout=-1", "positive"),
    ],
)
async def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        await open_metadata_store(url)


async def test_bad_options() -> None:
    with pytest.raises(ConfigurationError, match="unknown memory metadata option"):
        await open_metadata_store("memory://opts", poll_interval=1)
    with pytest.raises(ConfigurationError, match="positive number"):
        await open_metadata_store("memory://opts", session_timeout=0)
    with pytest.raises(ConfigurationError, match="callable"):
        await open_metadata_store("sqlite:///tmp/never.db", clock=3)
    with pytest.raises(ConfigurationError, match="must be a string"):
        await open_metadata_store(None)  # type: ignore[arg-type]


async def test_url_options_are_used(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/m.db?session_timeout=2.5&poll_interval=0.01"
    async with await open_metadata_store(url) as store:
        assert store.url == url
        assert isinstance(store, SqliteMetadataStore)
        assert store.session_timeout == 2.5
    async with await open_metadata_store(url, session_timeout=7) as store:
        assert isinstance(store, SqliteMetadataStore)
        assert store.session_timeout == 7


async def test_schemes_are_case_insensitive(tmp_path: Path) -> None:
    async with await open_metadata_store(f"SQLite://{tmp_path}/m.db") as store:
        await store.create("/x", b"")


async def test_sqlite_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(MetadataStoreError, match="does not exist"):
        await open_metadata_store(f"sqlite://{tmp_path}/no/such/dir/m.db")


async def test_sqlite_file_that_is_not_a_database(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(MetadataStoreError, match=r"bogus\.db"):
        await open_metadata_store(f"sqlite://{bogus}")


async def test_unreachable_zookeeper_fails_fast() -> None:
    port = free_port()  # nothing listens there
    # connect_timeout is 1 s: the hang guard is far above it.
    with trio.fail_after(20), pytest.raises(MetadataStoreError, match="cannot reach ZooKeeper"):
        await open_metadata_store(f"zk://127.0.0.1:{port}/walkit", connect_timeout=1.0)


async def test_memory_stores_share_by_name() -> None:
    async with (
        await open_metadata_store("memory://shared-by-name") as one,
        await open_metadata_store("memory://shared-by-name") as two,
        await open_metadata_store("memory://another-name") as three,
    ):
        await one.create("/x", b"1")
        assert (await two.get("/x")).value == b"1"
        assert await three.exists("/x") is None
