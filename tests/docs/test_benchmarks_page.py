"""docs/benchmarks.md is a results page: the machine the figures come from, a summary of the
latest figure of each benchmark against its target, the command that reproduces every benchmark,
and a history short enough to read (a run's appended report is folded into its section, not
kept as a log of runs)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "benchmarks.md"
#: Longest the page may grow before the appended reports must be folded in again.
MAX_LINES = 600


def section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section {title!r}"
    return match.group(1)


def test_the_page_names_the_machine_and_summarises_the_results() -> None:
    text = PAGE.read_text()
    assert "2 cores" in section(text, "The machine, and how to read the figures")
    rows = [line for line in section(text, "Summary").splitlines() if line.startswith("| ")]
    assert len(rows) >= 10
    targets = [row.rstrip(" |").rsplit("|", 1)[-1].strip() for row in rows[1:]]
    assert all(targets), "a row without its target"


def test_every_benchmark_script_has_its_command_and_its_section() -> None:
    text = PAGE.read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    scripts = sorted(p.name for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_"))
    assert scripts, "no benchmark scripts found"
    no_command = [name for name in scripts if f"python bench/{name}" not in text]
    no_section = [name for name in scripts if not any(f"bench/{name}" in h for h in headings)]
    assert (no_command, no_section) == ([], [])


def test_no_benchmark_runs_in_the_doc_tests() -> None:
    """The doc tests run every unmarked block (tests/docs/test_docs.py); a benchmark takes
    minutes of both cores (the chaos soak hours), so each block here says why it is not run."""
    lines = PAGE.read_text().splitlines()
    fences = [
        n for n, line in enumerate(lines) if re.fullmatch(r"```(python|sh|bash|console)", line)
    ]
    assert fences
    unmarked = [
        lines[n + 1] for n in fences if not re.fullmatch(r"<!-- not run: \S.* -->", lines[n - 1])
    ]
    assert unmarked == []


def test_the_page_is_condensed() -> None:
    assert len(PAGE.read_text().splitlines()) <= MAX_LINES
