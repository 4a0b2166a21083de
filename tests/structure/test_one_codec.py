"""One codec: walkit/_core owns every byte layout of a frame; I/O code never packs one itself.

An ``ast`` scan of walkit/ and walkit_bookie/: outside walkit/_core, only the bookie's storage
modules may use ``struct``, for their on-disk formats (journal records, entry logs, the index,
ledger state), which never go on the wire, and the sqlite store's inotify reader, for the
kernel's event records.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Modules with a file format of their own, and what it is.
DISK_FORMATS = {
    "walkit_bookie/storage/_journal.py": "journal records and log marks",
    "walkit_bookie/storage/_entrylog.py": "entry log records",
    "walkit_bookie/storage/_index.py": "index keys and locations",
    "walkit_bookie/storage/_ledger.py": "a ledger's state record",
    "walkit/metadata/_file_changes.py": "Linux inotify event records, read from the kernel",
}


def struct_uses(source: str) -> list[str]:
    """Every use of the struct module in a module's source (imports and calls), as text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == "struct" for a in node.names):
            found.append(f"line {node.lineno}: import struct")
        elif isinstance(node, ast.ImportFrom) and node.module == "struct":
            found.append(f"line {node.lineno}: from struct import ...")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "struct"
        ):
            found.append(f"line {node.lineno}: struct.{node.attr}")
    return found


def test_no_frame_is_packed_outside_the_codec() -> None:
    offenders = {}
    for package in ("walkit", "walkit_bookie"):
        for path in sorted((REPO / package).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            if name.startswith("walkit/_core/") or name in DISK_FORMATS:
                continue
            uses = struct_uses(path.read_text(encoding="utf-8"))
            if uses:
                offenders[name] = uses
    assert offenders == {}, "pack frames with walkit._core.wire, not struct"


def test_the_scan_finds_struct_however_it_is_written() -> None:
    assert struct_uses("import struct\nX = struct.Struct('>I')\n") == [
        "line 1: import struct",
        "line 2: struct.Struct",
    ]
    assert struct_uses("from struct import pack\n") == ["line 1: from struct import ..."]
    assert struct_uses("def f(b):\n    return struct.pack('>I', b)\n") == ["line 2: struct.pack"]
    assert struct_uses("import os\nos.path.join('a')\n") == []


def test_every_disk_format_module_exists_and_uses_struct() -> None:
    for name in DISK_FORMATS:
        assert struct_uses((REPO / name).read_text(encoding="utf-8")), name
