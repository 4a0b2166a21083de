"""``walkit cluster check`` reports each lake the logs offload to: reachable (storage takes a
write, the catalog and the logs' tables load) or not, with a reason that never holds the
catalog's secrets; an unreachable lake fails the check. On a file:// lake and on the S3 server
process."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import trio

from tests._cluster import free_port
from tests.client.conftest import cluster, connect
from tests.lake._s3 import lake_options
from tests.log.test_cli_log import walkit
from walkit import Log
from walkit._core.lake import redact

SECRET = "hunter2-not-to-be-printed"


async def _offloaded_log(url: str, tmp_path: Path, **lake: Any) -> None:
    async with connect(url, wall_clock=time.time) as client:
        log = await Log.open(
            client, "orders", roll_entries=5, ensemble_size=1, write_quorum=1, ack_quorum=1, **lake
        )
        async with log.writer() as w:
            for i in range(12):
                await w.append(b"r%d" % i)
        assert await log.offload() == 2


async def _check(url: str, *args: str) -> tuple[int, dict[str, Any], str]:
    # (a generous bound: two cores shared by many; the closed ports give --timeout 5 after)
    done = await walkit(url, "cluster", "check", "--json", "--timeout", "60", *args)
    text = done.stdout.decode() + done.stderr.decode()
    assert "Traceback" not in text, text
    return done.returncode, json.loads(done.stdout), text


async def test_a_file_lake_reachable_then_gone(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    lake_dir = tmp_path / "lake"
    async with cluster(url, tmp_path, 1):
        await _offloaded_log(url, tmp_path, offload_to=f"file://{lake_dir}")
        code, report, _text = await _check(url)
        assert code == 0 and report["ok"] is True, report
        [row] = report["lakes"]
        assert row["lake"] == f"file://{lake_dir}" and row["logs"] == ["orders"], row
        assert row["ok"] is True and row["error"] is None and row["ms"] > 0, row
        assert not [p for p in lake_dir.iterdir() if p.name.startswith(".walkit")]  # no probe

        text = await walkit(url, "cluster", "check")
        assert text.returncode == 0, text
        assert b"1 of 1 lakes reachable" in text.stdout
        assert b"orders" in text.stdout

        (lake_dir / "catalog.db").rename(tmp_path / "catalog.db")
        code, report, _text = await _check(url)
        assert code == 1 and report["ok"] is False, report
        assert "catalog.db does not exist" in report["lakes"][0]["error"], report
        assert all(b["ok"] for b in report["bookies"]), report  # the bookies still pass
        (tmp_path / "catalog.db").rename(lake_dir / "catalog.db")

        lake_dir.rename(tmp_path / "moved")
        code, report, _text = await _check(url)
        assert code == 1, report
        assert report["lakes"][0]["error"] == f"directory {lake_dir} does not exist", report
        text = await walkit(url, "cluster", "check")
        assert text.returncode == 1 and b"0 of 1 lakes reachable" in text.stdout, text
        assert b"FAILED" in text.stdout

        lake_dir.write_bytes(b"not a directory")  # a file where the lake was
        code, report, _text = await _check(url)
        assert code == 1 and "does not exist" in report["lakes"][0]["error"], report
        lake_dir.unlink()
        (tmp_path / "moved").rename(lake_dir)
        code, report, _text = await _check(url)
        assert code == 0, report

        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog(
            "walkit", uri=f"sqlite:///{lake_dir / 'catalog.db'}", warehouse=f"file://{lake_dir}"
        )
        catalog.drop_table(("walkit", "orders"))  # the catalog lost the log's table
        code, report, _text = await _check(url)
        assert code == 1, report
        error = report["lakes"][0]["error"]
        assert error == "log orders: table walkit.orders is not in the catalog", error


async def test_an_s3_lake_reachable_then_on_a_closed_port_without_printing_secrets(
    tmp_path: Path, s3_endpoint: str
) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    lake = lake_options("s3", tmp_path, s3_endpoint)
    async with cluster(url, tmp_path, 1):
        await _offloaded_log(url, tmp_path, **lake)
        # (moto takes any key: the secret stands for a real one given in the properties)
        catalog = {
            **lake["offload_catalog"],
            "s3.access-key-id": "testing",
            "s3.secret-access-key": SECRET,
        }
        # Without the catalog (only the metadata store knows the lake): it says what it needs.
        code, report, _text = await _check(url)
        assert code == 1 and "--lake-catalog" in report["lakes"][0]["error"], report

        code, report, text = await _check(url, "--lake-catalog", json.dumps(catalog))
        assert code == 0, report["lakes"][0]["error"]
        [row] = report["lakes"]
        assert row["lake"] == lake["offload_to"] and row["logs"] == ["orders"], row
        assert row["ok"] is True, row
        assert SECRET not in text

        closed = {**catalog, "s3.endpoint": f"http://127.0.0.1:{free_port()}"}
        code, report, text = await _check(
            url, "--lake-catalog", json.dumps(closed), "--timeout", "20"
        )
        assert code == 1, report
        [row] = report["lakes"]
        assert row["ok"] is False and "storage" in row["error"], row["error"]
        assert SECRET not in text
        shown = await walkit(
            url, "cluster", "check", "--timeout", "5", "--lake-catalog", json.dumps(closed)
        )
        assert shown.returncode == 1 and SECRET.encode() not in shown.stdout + shown.stderr

        # A catalog that cannot be reached, its password in its URL.
        rest = {
            "type": "rest",
            "uri": f"http://walkit:{SECRET}@127.0.0.1:{free_port()}",
            "s3.endpoint": s3_endpoint,
            "s3.region": "us-east-1",
            "token": SECRET,
        }
        code, report, text = await _check(
            url, "--lake", lake["offload_to"], "--lake-catalog", json.dumps(rest), "--timeout", "30"
        )
        assert code == 1 and "catalog" in report["lakes"][0]["error"], report["lakes"][0]["error"]
        assert SECRET not in text


async def test_a_named_lake_and_one_without_the_lake_extra(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    lake_dir = tmp_path / "lake"
    async with cluster(url, tmp_path, 1):
        await _offloaded_log(url, tmp_path, offload_to=f"file://{lake_dir}")
        empty = tmp_path / "empty"
        empty.mkdir()
        code, report, _text = await _check(url, "--lake", f"file://{empty}")
        assert code == 0, report
        assert report["lakes"] == [
            {
                "lake": f"file://{empty}",
                "logs": [],
                "ok": True,
                "ms": report["lakes"][0]["ms"],
                "error": None,
            }
        ]
        bad = await walkit(url, "cluster", "check", "--lake", "ftp://x")
        assert bad.returncode == 1 and b"--lake 'ftp://x'" in bad.stderr, bad
        assert b"file:///absolute/dir" in bad.stderr and b"Traceback" not in bad.stderr, bad

        # Without pyiceberg importable: the lake is listed, saying what to install.
        script = (
            "import sys; sys.modules['pyiceberg'] = None; sys.argv[0] = 'walkit'; "
            "from walkit.cli import main; main()"
        )
        for extra, code_wanted, ok in (((), 0, None), (("--lake", f"file://{lake_dir}"), 1, False)):
            with trio.fail_after(120):
                done = await trio.run_process(
                    [sys.executable, "-c", script, "cluster", "check", "--json", *extra],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    env=dict(os.environ, WALKIT_METADATA=url),
                )
            assert done.returncode == code_wanted, done
            [row] = json.loads(done.stdout)["lakes"]
            assert row["ok"] is ok, row
            assert "pip install 'walkit[lake]'" in row["error"] and "pyiceberg" in row["error"]


def test_redact_hides_secret_properties_and_url_passwords() -> None:
    props = {
        "uri": "postgresql://walkit:pw-in-url@db:5432/lake",
        "s3.secret-access-key": SECRET,
        "s3.endpoint": "http://127.0.0.1:9000",
    }
    said = f"cannot connect to postgresql://walkit:pw-in-url@db:5432/lake with {SECRET}"
    text = redact(said, props)
    assert "pw-in-url" not in text and SECRET not in text, text
    assert "postgresql://walkit:***@db:5432/lake" in text and "127.0.0.1" not in text
    assert redact("at http://127.0.0.1:9000", props) == "at http://127.0.0.1:9000"
