"""CHANGELOG.md keeps Keep a Changelog's shape: releases newest first, each with the standard
sections at most once, and one entry per change of a line or two (details belong in the docs)."""

from __future__ import annotations

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"

SECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
RELEASE = re.compile(r"^## \[(Unreleased|\d+\.\d+\.\d+)\]( - \d{4}-\d{2}-\d{2})?$")
MAX_LINES = 2
MAX_COLUMNS = 100


def problems(text: str) -> list[str]:
    """Every way ``text`` departs from the shape above, one line each (empty when it keeps it)."""
    found: list[str] = []
    release: str | None = None
    section: str | None = None
    seen: set[str] = set()
    entry: list[str] = []

    def end_entry() -> None:
        if len(entry) > MAX_LINES:
            found.append(f"{release}/{section}: an entry of {len(entry)} lines: {entry[0][:70]}")
        entry.clear()

    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_COLUMNS:
            found.append(f"line {number}: {len(line)} columns")
        if line.startswith("## "):
            end_entry()
            match = RELEASE.match(line)
            if not match:
                found.append(f"line {number}: not a release heading: {line}")
            release, section, seen = (match.group(1) if match else line), None, set()
        elif line.startswith("### "):
            end_entry()
            section = line[4:]
            if section not in SECTIONS:
                found.append(f"line {number}: {release}: unknown section {section!r}")
            if section in seen:
                found.append(f"line {number}: {release}: {section} twice")
            seen.add(section)
        elif line.startswith("- "):
            end_entry()
            if section is None:
                found.append(f"line {number}: an entry outside a section")
            entry.append(line)
        elif line.startswith("  ") and entry:
            entry.append(line)
        elif line.strip():
            end_entry()
            if section is not None:
                found.append(f"line {number}: text in {release}/{section} that is not an entry")
        else:
            end_entry()
    end_entry()
    return found


def test_the_changelog_has_short_entries_in_standard_sections() -> None:
    assert problems(CHANGELOG.read_text()) == []


def test_the_check_finds_a_long_entry_and_an_unknown_section() -> None:
    text = "## [Unreleased]\n\n### Added\n- one\n  two\n  three\n\n### Improved\n- x\n"
    found = problems(text)
    assert any("an entry of 3 lines" in p for p in found)
    assert any("unknown section 'Improved'" in p for p in found)
    assert problems("## [Unreleased]\n\n### Added\n- one\n  two\n- three\n") == []
