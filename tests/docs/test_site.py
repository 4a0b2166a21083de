"""The documentation site: ``mkdocs build --strict`` (as ``scripts/docs.sh`` runs it) fails on a
broken link or reference; the API reference has an entry for every public name of every public
module; and headless Chromium renders the home page and an API page."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Each API page and the modules whose ``__all__`` it documents.
API_PAGES = {
    "walkit": ["walkit"],
    "errors": ["walkit.errors"],
    "sync": ["walkit.sync"],
    "log": ["walkit.log"],
    "ledger": ["walkit.ledger"],
    "lake": ["walkit.lake"],
    "statemachine": ["walkit.statemachine", "walkit.recipes"],
    "metadata": ["walkit.metadata"],
    "net": ["walkit.net"],
    "placement": ["walkit.placement"],
    "autorecovery": ["walkit.autorecovery"],
    "testing": ["walkit.testing"],
    "spark": ["walkit.spark"],
    "otel": ["walkit.otel"],
    "bookie": ["walkit_bookie"],
}


def build(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("site")
    done = build(out)
    assert done.returncode == 0, done.stdout + done.stderr
    yield out


def test_every_public_name_has_an_api_entry(site: Path) -> None:
    missing = []
    for page, modules in API_PAGES.items():
        text = (site / "api" / f"{page}.html").read_text()
        anchors = set(re.findall(r'id="([A-Za-z_][\w.]*)"', text))
        for name in modules:
            module = importlib.import_module(name)
            for public in module.__all__:
                value = getattr(module, public)
                if type(value).__name__ == "module":
                    continue  # a submodule re-exported (walkit.errors): a page of its own
                if f"{name}.{public}" not in anchors:
                    missing.append(f"{name}.{public}")
    assert missing == []


def test_the_api_pages_cover_every_public_module() -> None:
    """A public package of walkit (no underscore) has an API page."""
    documented = {m for modules in API_PAGES.values() for m in modules}
    packages = {
        f"walkit.{p.name}"
        for p in (REPO / "walkit").iterdir()
        if p.is_dir() and not p.name.startswith("_") and (p / "__init__.py").exists()
    }
    # walkit.shared is the bookie's, not an application's: it says so and is left out.
    assert packages - documented - {"walkit.shared"} == set()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """A link to a missing page, and one to a missing heading of a page that exists (one build
    reports both)."""
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "docs", copy / "docs")
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    page = copy / "docs" / "index.md"
    broken = "See [nowhere](no-such-page.md) and [no heading](log.md#no-such-heading).\n"
    page.write_text(page.read_text() + "\n" + broken)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.returncode != 0
    warnings = [line for line in (done.stdout + done.stderr).splitlines() if "WARNING" in line]
    assert any("no-such-page.md" in line for line in warnings)
    assert any("#no-such-heading" in line for line in warnings)  # MkDocs' default: INFO


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def dump_dom(browser: str, page: Path) -> str:
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={page.parent / '.chromium'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(chromium() is None, reason="needs chromium (scripts/install-chromium.sh)")
def test_the_home_page_and_an_api_page_render_in_chromium(site: Path) -> None:
    browser = chromium()
    assert browser is not None
    home = dump_dom(browser, site / "index.html")
    assert "<title>walkit</title>" in home
    assert "A write-ahead log framework for Python applications" in home
    # The navigation Material builds holds every section.
    for section in ("Using walkit", "Running walkit", "API reference"):
        assert section in home, section
    api = dump_dom(browser, site / "api" / "walkit.html")
    assert 'id="walkit.Client.connect"' in api
    assert 'id="walkit.Log.open"' in api
    assert "WriterFencedError" in api
