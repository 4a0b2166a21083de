"""What a reader of the repository meets: no internal issue numbers a reader cannot follow (in
code, tests, docs, scripts or the changelog; public trackers' references such as
"Pulsar #6567" are fine), no built artifacts committed, no file of this machine's paths."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: "issue 12", "issues 11 and 13", "finding 3", "(issue 11, item 6)": the project's own
#: tracker, which readers do not have.
INTERNAL_REFERENCE = re.compile(r"\b(issues? #?\d+|findings? \d+)", re.IGNORECASE)
#: Text files a reader reads.
SUFFIXES = {".py", ".md", ".sh", ".toml", ".yml", ".yaml", ".lua", ".json", ".txt"}
#: Largest file the repository may hold (golden files and docs included).
MAX_BYTES = 1 << 20


def tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60
    ).stdout
    return [REPO / name for name in out.decode().split("\0") if name]


def test_no_internal_issue_numbers() -> None:
    found = []
    for path in tracked():
        if path.suffix not in SUFFIXES or path == Path(__file__) or not path.exists():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if INTERNAL_REFERENCE.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert found == []


def test_no_built_artifacts_or_large_files() -> None:
    wheels = [p for p in tracked() if p.suffix in {".whl", ".egg", ".pyc", ".so"}]
    assert wheels == []
    large = [p for p in tracked() if p.exists() and p.stat().st_size > MAX_BYTES]
    assert large == []


def test_the_pattern_finds_internal_references() -> None:
    assert INTERNAL_REFERENCE.search("(issue 11, item 6)")
    assert INTERNAL_REFERENCE.search("Issue 12's targets")
    assert INTERNAL_REFERENCE.search("finding 3")
    assert not INTERNAL_REFERENCE.search("Pulsar #6567 asked for a columnar format")
    assert not INTERNAL_REFERENCE.search("KAFKA-16511")
