"""``walkit-bookie --config FILE``: the options in a TOML file, with the checks the flags have,
clear errors naming the file and the key, and flags that win over the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bookie._helpers import BookieProcess
from walkit_bookie import BookieConfig
from walkit_bookie.cli import build_parser, config_from_args


def _config(*argv: str) -> BookieConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "walkit_bookie.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_the_file_sets_options_and_flags_win(tmp_path: Path) -> None:
    file = tmp_path / "bookie.toml"
    file.write_text(
        f'data_dirs = ["{tmp_path / "j"}", "{tmp_path / "l"}"]\n'
        "port = 3181\n"
        'network_location = "/r1/rack2"\n'
        'journal_max_size = "64MiB"\n'  # sizes as on the command line...
        "entrylog_max_size = 268435456\n"  # ... or in bytes
        'compaction_max_rate = "8MiB/s"\n'
        "autorecovery = false\n"
        'authorize = ["read=alice"]\n'
        'auth = "token"\n'
        f'auth_token_file = "{tmp_path / "tokens"}"\n'
    )
    config = _config("--config", str(file))
    assert config.data_dirs == (str(tmp_path / "j"), str(tmp_path / "l"))
    assert (config.port, config.network_location) == (3181, "/r1/rack2")
    assert (config.journal_max_size, config.entrylog_max_size) == (64 << 20, 256 << 20)
    assert config.compaction_max_rate == 8 << 20
    assert config.authorize == ("read=alice",)
    # walkit-bookie's own defaults for what the file leaves out (the class's are off)
    assert (config.autorecovery, config.fragment_copies) == (False, True)
    flagged = _config(
        "--config", str(file), "--port", "4181", "--data-dir", str(tmp_path / "x"),
        "--journal-max-size", "1GiB", "--no-fragment-copies",
    )  # fmt: skip
    assert (flagged.port, flagged.data_dirs) == (4181, (str(tmp_path / "x"),))
    assert flagged.journal_max_size == 1 << 30
    assert flagged.network_location == "/r1/rack2"
    assert (flagged.autorecovery, flagged.fragment_copies) == (False, False)


def test_the_admin_token_comes_from_the_file_or_a_flag(tmp_path: Path) -> None:
    token_file = tmp_path / "admin-token"
    token_file.write_text("t" * 20 + "\n")
    token_file.chmod(0o600)
    file = tmp_path / "bookie.toml"
    file.write_text(f'data_dirs = ["{tmp_path / "d"}"]\nadmin_token_file = "{token_file}"\n')
    assert _config("--config", str(file)).admin_token == "t" * 20
    assert _config("--config", str(file), "--admin-token", "f" * 16).admin_token == "f" * 16


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "jornal_max_size = 3\n",
            "unknown key 'jornal_max_size' (did you mean 'journal_max_size'?)",
        ),
        ("config = 'other.toml'\n", "unknown key 'config'"),
        ("port = 70000\n", "key port: must be in 0..65535, not 70000"),
        ("port = '3181x'\n", "key port: '3181x' is not an integer"),
        ("journal_max_size = 'lots'\n", "key journal_max_size: 'lots' is not a size"),
        ("disk_usage_threshold = 2\n", "key disk_usage_threshold: must be in (0, 1], not 2"),
        ("tls_client_auth = 'always'\n", "must be one of none, optional, require"),
        ("autorecovery = 'yes'\n", "key autorecovery: must be true or false"),
        ("admin_token = 'short'\n", "key admin_token: must be at least 16 printable"),
        ("[tls]\ncert = 'a.pem'\n", "unknown key 'tls'"),
        ("data_dirs = \n", "is not TOML"),
    ],
)
def test_a_bad_file_exits_2_naming_the_file_and_the_key(
    tmp_path: Path, content: str, message: str
) -> None:
    file = tmp_path / "bookie.toml"
    file.write_text(f'data_dirs = ["{tmp_path / "d"}"]\n{content}' if "data_dirs" not in content
                    else content)  # fmt: skip
    done = _run("--config", str(file), "--check-config", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"config file {file}" in done.stderr and message in done.stderr, done.stderr
    assert "short" not in done.stderr  # a token is never repeated
    assert not (tmp_path / "d").exists()  # nothing started


def test_a_missing_file_and_a_missing_data_dir_are_clear(tmp_path: Path) -> None:
    done = _run("--config", "nope.toml", cwd=tmp_path)
    assert done.returncode == 2 and "cannot read config file nope.toml" in done.stderr
    (tmp_path / "empty.toml").write_text("port = 3181\n")
    done = _run("--config", "empty.toml", cwd=tmp_path)
    assert done.returncode == 2 and "--data-dir" in done.stderr


def test_check_config_says_ok_and_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "bookie.toml").write_text(f'data_dirs = ["{tmp_path / "d"}"]\n')
    done = _run("--config", "bookie.toml", "--check-config", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "configuration OK" in done.stdout
    assert not (tmp_path / "d").exists()


async def test_a_bookie_runs_from_its_config_file(tmp_path: Path) -> None:
    from walkit.metadata import list_bookies, open_metadata_store

    url = f"sqlite://{tmp_path / 'metadata.db'}"
    file = tmp_path / "bookie.toml"
    file.write_text(
        f'metadata = "{url}"\n'
        f'data_dirs = ["{tmp_path / "d"}"]\n'
        'network_location = "/r9/rack9"\n'
        "gc_interval = 600\n"
        'log_format = "json"\n'
    )
    proc = BookieProcess([], "--config", str(file), log=tmp_path / "bookie.log")
    bid = await proc.start()
    try:
        async with await open_metadata_store(url) as store:
            bookies = await list_bookies(store)
            assert bookies.writable[bid].network_location == "/r9/rack9"
        assert proc.terminate() == 0
        started = [line for line in proc.stderr().splitlines() if "bookie_started" in line]
        assert started and json.loads(started[0])["event"] == "bookie_started"  # the file's
    finally:
        proc.kill()


def test_the_option_reference_in_the_docs_is_current() -> None:
    """docs/bookie.md's table is made from the declarations (scripts/options_doc.py)."""
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(repo / "scripts" / "options_doc.py"), "docs/bookie.md", "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=repo,
    )
    assert done.returncode == 0, done.stdout + done.stderr
