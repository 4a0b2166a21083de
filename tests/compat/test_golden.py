"""The golden corpus: every file a release wrote reads with today's code, and a format does not
change under the same version.

``tests/compat/<release>/`` holds what that release's code wrote (``make_corpus.py``; see
docs/formats.md). For the byte-level formats (``_kinds.py``):

- today's reader must read every golden file of every release and find in it what the
  description beside it says;
- today's writer, given the same object, must write the same bytes, unless it writes a newer
  version of the format (and then the first check proves a reader for the old one is kept).

The cluster corpus (a bookie's data dir, its sqlite metadata file and the metadata exported
from sqlite and ZooKeeper) is read in ``test_golden_cluster.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.compat._kinds import KINDS, Kind
from tests.compat._release import releases

HERE = Path(__file__).resolve().parent


def corpora() -> list[Path]:
    return sorted(p for p in HERE.iterdir() if p.is_dir() and p.name[:1].isdigit())


def _cases() -> list[Any]:
    found = []
    for corpus in corpora():
        for kind in KINDS:
            for golden in sorted((corpus / kind).glob("*.bin")):
                found.append(
                    pytest.param(
                        corpus.name, kind, golden, id=f"{corpus.name}-{kind}-{golden.stem}"
                    )
                )
    return found


CASES = _cases()


def _load(golden: Path) -> tuple[bytes, int, dict[str, Any]]:
    doc = json.loads(golden.with_suffix(".json").read_text())
    return golden.read_bytes(), int(doc["version"]), doc["description"]


def test_every_release_has_a_corpus_with_every_kind() -> None:
    names = {corpus.name for corpus in corpora()}
    assert set(releases()) <= names, "a release without its corpus: run make_corpus.py"
    for corpus in corpora():
        missing = [kind for kind in KINDS if not any((corpus / kind).glob("*.bin"))]
        assert not missing, f"{corpus.name} has no golden files of {missing}"
    assert (HERE / "0.1.0" / "wire").is_dir()


@pytest.mark.parametrize(("release", "kind", "golden"), CASES)
def test_today_reads_what_the_release_wrote(release: str, kind: str, golden: Path) -> None:
    data, _version, description = _load(golden)
    KINDS[kind].read(data, description)


@pytest.mark.parametrize(("release", "kind", "golden"), CASES)
def test_a_format_changes_only_with_a_new_version(release: str, kind: str, golden: Path) -> None:
    data, version, description = _load(golden)
    check_unchanged(KINDS[kind], release, golden.stem, data, version, description)


def check_unchanged(
    spec: Kind, release: str, case: str, data: bytes, version: int, description: dict[str, Any]
) -> None:
    """AssertionError when today's writer makes other bytes of the golden object under the
    version the release wrote it in."""
    if not spec.stable(description):
        return  # (its bytes depend on a compression library; the read test covers it)
    written = spec.write(description)
    if written == data:
        return
    now = spec.version_of(written)
    assert now != version, (
        f"{spec.name} {case}: today's code writes other bytes than release {release} did for "
        f"the same object, under the same format version ({version}).\n"
        f"If the change is meant: raise {spec.version_name}, keep a reader for version "
        f"{version} (the read test of this corpus must still pass), and write the corpus of "
        f"the next release (python -m tests.compat.make_corpus VERSION). See docs/formats.md.\n"
        f"release {release}: {data[:120]!r}\ntoday: {written[:120]!r}"
    )


def test_the_check_catches_a_silent_change_and_lets_a_new_version_through() -> None:
    golden = HERE / "0.1.0" / "record_set" / "several.bin"
    data, version, description = _load(golden)
    spec = KINDS["record_set"]
    silent = attrs.evolve(spec, write=lambda d: spec.write(d) + b"\x00")
    with pytest.raises(AssertionError, match=re.escape("raise walkit._core.record_set.VERSION")):
        check_unchanged(silent, "0.1.0", "several", data, version, description)
    bumped = attrs.evolve(silent, version_of=lambda _data: version + 1)
    check_unchanged(bumped, "0.1.0", "several", data, version, description)
