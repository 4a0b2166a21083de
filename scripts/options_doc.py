"""Write the reference of declared options (``walkit._core.options``) into a Markdown page.

    python scripts/options_doc.py docs/bookie.md           # rewrite the page's tables
    python scripts/options_doc.py docs/bookie.md --check   # exit 1 when one is stale

Each table sits between ``<!-- options_doc.py MODULE:CLASS ... -->`` and ``<!-- end -->``: a
row per option of those classes, with its flags, its key in a config file, its default and
its help, as the declarations have them. The docs test runs ``--check``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_graph import update_doc

from walkit._cli._args import help_for
from walkit._core.options import Option, declared

MARK = re.compile(r"^<!-- options_doc\.py (?P<args>[^>]*?) -->\n", re.M)
END = "<!-- end -->"
#: Options a config file may not hold (``walkit_bookie.cli``).
NOT_IN_FILES = {"config", "check_config"}


def rows(names: list[str]) -> Iterator[str]:
    yield "| flag | key in a config file | what it does (default) |"
    yield "| --- | --- | --- |"
    for name in names:
        module, _, attr = name.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        for field, option in declared(cls):
            flags = option.flags_for(field.name)
            value = f" {option.metavar}" if _takes_value(option) else ""
            spelled = [f"`{flag}{value}`".replace("|", "\\|") for flag in flags]
            key = "—" if field.name in NOT_IN_FILES else f"`{field.name}`"
            text = help_for(field, option).replace("%%", "%").replace("|", "\\\\|")
            yield f"| {', '.join(spelled) or '—'} | {key} | {text} |"


def _takes_value(option: Option) -> bool:
    return not option.kind.switch and option.metavar is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\\n\\n")[0])
    parser.add_argument("doc", type=Path)
    parser.add_argument("--check", action="store_true", help="only compare")
    args = parser.parse_args(argv)
    text = args.doc.read_text(encoding="utf-8")
    fresh = update_doc(text, lambda names: list(rows(names)), MARK, END)
    if fresh == text:
        return 0
    if args.check:
        print(f"{args.doc}: the option tables are stale: run {Path(__file__).name} {args.doc}")
        return 1
    args.doc.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
