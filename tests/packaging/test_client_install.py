"""A client install has no bookie server in it: the wheel, installed without extras in a clean
venv (its dependencies from the package index), runs a client program against a sandbox
started from the project's own environment, cannot import the bookie's packages, and its
bookie commands say in one line what to install.

One wheel and one venv serve every test of the module (a module fixture)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests._sandbox import Sandbox

pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
HINT = "pip install 'walkit[bookie]'"
#: The bookie's packages, which the client install must not bring.
SERVER_ONLY = ("lmdb", "h11", "prometheus_client")


def _run(*argv: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WALKIT_", "PYTHON"))}
    return subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=dict(env, PIP_DISABLE_PIP_VERSION_CHECK="1"),
        check=False,
    )


def _checked(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the project's wheel without extras; its ``bin`` directory."""
    root = tmp_path_factory.mktemp("client-install")
    # The sources copied, so that the build leaves nothing in the checkout (and no stale
    # build/ directory of an earlier build gets into the wheel).
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in ("walkit", "walkit_bookie"):
        shutil.copytree(
            REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    wheels = root / "wheels"
    _checked(_run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", wheels, ".", cwd=source))
    (wheel,) = wheels.glob("walkit-*.whl")
    venv = root / "venv"
    _checked(_run(sys.executable, "-m", "venv", venv, cwd=root))
    _checked(_run(venv / "bin" / "python", "-m", "pip", "install", wheel, cwd=root))
    return venv / "bin"


@pytest.mark.parametrize("module", SERVER_ONLY)
def test_the_bookies_packages_are_not_installed(clean_venv: Path, module: str) -> None:
    done = _run(clean_venv / "python", "-c", f"import {module}", cwd=clean_venv)
    assert done.returncode == 1
    assert f"No module named '{module}'" in done.stderr


PROGRAM = textwrap.dedent(
    """
    import asyncio, json, os, sys
    import walkit

    async def main(url):
        async with walkit.Client.connect(url) as client:
            async with walkit.Log.open(client, "client-install") as log:
                async with log.writer() as writer:
                    positions = await writer.append_batch([b"r%d" % i for i in range(20)])
                payloads = []
                async for record in log.reader(start=positions[0]):
                    payloads.append(record.payload.decode())
                    if record.position == positions[-1]:
                        break
        print(json.dumps({
            "payloads": payloads,
            "walkit": walkit.__file__,
            "loaded": sorted(m for m in ("lmdb", "h11", "prometheus_client") if m in sys.modules),
        }))

    asyncio.run(main(sys.argv[1]))
    """
)


def test_a_client_program_runs_against_a_sandbox(
    clean_venv: Path, walkit_sandbox: Sandbox, tmp_path: Path
) -> None:
    program = tmp_path / "client.py"
    program.write_text(PROGRAM)
    done = _checked(_run(clean_venv / "python", program, walkit_sandbox.metadata_url, cwd=tmp_path))
    result = json.loads(done.stdout)
    assert result["payloads"] == [f"r{i}" for i in range(20)]
    assert Path(result["walkit"]).is_relative_to(clean_venv.parent)  # not the checkout's
    assert result["loaded"] == []


def test_the_walkit_command_of_a_client_install_lists_the_bookies(
    clean_venv: Path, walkit_sandbox: Sandbox
) -> None:
    url = walkit_sandbox.metadata_url
    done = _checked(
        _run(clean_venv / "walkit", "--metadata", url, "bookies", "--json", cwd=clean_venv)
    )
    assert len(json.loads(done.stdout)) == 3


@pytest.mark.parametrize(
    ("command", "what"),
    [
        (["walkit-bookie", "--data-dir", "bookie"], "walkit-bookie"),
        (["walkit", "sandbox", "--data-dir", "sandbox"], "walkit sandbox"),
    ],
    ids=["walkit-bookie", "walkit sandbox"],
)
def test_the_bookie_commands_say_what_to_install(
    clean_venv: Path, tmp_path: Path, command: list[str], what: str
) -> None:
    done = _run(clean_venv / command[0], *command[1:], cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{what} needs walkit's bookie extra") and line.endswith(HINT), line
    assert not list(tmp_path.iterdir())  # started nothing, made no data directory


def test_importing_the_bookie_names_the_extra(clean_venv: Path) -> None:
    done = _run(clean_venv / "python", "-c", "import walkit_bookie", cwd=clean_venv)
    assert done.returncode == 1
    assert "ModuleNotFoundError: walkit_bookie needs walkit's bookie extra" in done.stderr
    assert HINT in done.stderr
