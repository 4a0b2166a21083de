"""The log events renamed when walkit settled its words keep their old names findable for one
release (``walkit._logging.RENAMED_EVENTS``): each new name is one the code logs, no code logs an
old name any more, and the docs list every pair (docs/autorecovery.md)."""

from __future__ import annotations

from pathlib import Path

from walkit._logging import RENAMED_EVENTS

REPO = Path(__file__).resolve().parents[2]


def _sources() -> str:
    files = sorted((REPO / "walkit").rglob("*.py")) + sorted((REPO / "walkit_bookie").rglob("*.py"))
    return "\n".join(f.read_text(encoding="utf-8") for f in files if f.name != "_logging.py")


def test_each_renamed_event_is_logged_under_its_new_name_only() -> None:
    code = _sources()
    for new, old in RENAMED_EVENTS.items():
        assert f'"{new}"' in code, f"no code logs {new!r}: drop it from RENAMED_EVENTS"
        assert f'"{old}"' not in code, f"{old!r} is still logged: it was renamed {new!r}"


def test_the_docs_list_every_renamed_event() -> None:
    doc = (REPO / "docs" / "autorecovery.md").read_text(encoding="utf-8")
    for new, old in RENAMED_EVENTS.items():
        assert f"| `{old}` | `{new}`" in doc, (old, new)
