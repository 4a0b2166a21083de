"""``walkit-bookie --event-loop auto|asyncio|uvloop|trio`` (config file key ``event_loop``): which
loop runs the bookie process, and clear refusals of a loop that cannot run it here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import walkit._loop
from tests.bookie._helpers import BookieProcess
from walkit.errors import ConfigurationError
from walkit_bookie import cli

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None


def _without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walkit._loop, "uvloop_available", lambda: False)


def test_auto_is_uvloop_when_installed_else_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.event_loop("auto") == ("uvloop" if HAVE_UVLOOP else "asyncio")
    for name in ("asyncio", "trio"):
        assert cli.event_loop(name) == name
    _without_uvloop(monkeypatch)
    assert cli.event_loop("auto") == "asyncio"
    with pytest.raises(
        ConfigurationError,
        match=r"--event-loop uvloop: .*uvloop.*not installed.*'walkit\[bookie\]'",
    ):
        cli.event_loop("uvloop")


def test_a_loop_that_cannot_run_exits_2_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _without_uvloop(monkeypatch)
    data = tmp_path / "d"
    argv = ["--data-dir", str(data), "--event-loop", "uvloop", "--check-config"]
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert "uvloop is not installed" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["--data-dir", str(data), "--event-loop", "tokio", "--check-config"])
    assert exited.value.code == 2
    assert "invalid choice: 'tokio'" in capsys.readouterr().err
    assert not data.exists()


def test_the_config_file_sets_the_loop_and_a_flag_wins(tmp_path: Path) -> None:
    file = tmp_path / "bookie.toml"
    file.write_text(f'data_dirs = ["{tmp_path / "d"}"]\nevent_loop = "trio"\n')
    parser = cli.build_parser()
    command, _ = cli.configure(parser.parse_args(["--config", str(file)]))
    assert command.event_loop == "trio"
    command, _ = cli.configure(parser.parse_args(["--config", str(file), "--event-loop", "auto"]))
    assert command.event_loop == "auto"
    file.write_text(f'data_dirs = ["{tmp_path / "d"}"]\nevent_loop = "tokio"\n')
    with pytest.raises(ConfigurationError, match="event_loop"):
        cli.configure(parser.parse_args(["--config", str(file)]))


@pytest.mark.parametrize("asked", ["auto", "trio"])
async def test_the_bookie_process_runs_on_the_loop_asked(tmp_path: Path, asked: str) -> None:
    proc = BookieProcess(
        [tmp_path / "d"], "--event-loop", asked, "--log-format", "json", log=tmp_path / "b.log"
    )
    await proc.start()
    try:
        assert proc.terminate() == 0
        events = [json.loads(line) for line in proc.stderr().splitlines() if line.startswith("{")]
        chosen = [e for e in events if e["event"] == "bookie_event_loop"]
        assert chosen and chosen[0]["event_loop"] == cli.event_loop(asked)
        assert chosen[0]["asked"] == asked
        assert any(e["event"] == "bookie_stopped" for e in events)
    finally:
        proc.kill()
