"""Whether a lake is reachable (``walkit cluster check``; blocking: run it in a worker thread).

A lake passes when its storage answers and takes a write (a probe object written at its root
and deleted, through the same pyarrow filesystem pyiceberg's ``PyArrowFileIO`` gives the
offloader and the readers), its catalog loads, and so does the table of every log that has
ledgers in it. Errors are said in one line without the catalog's secrets.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from typing import Final

from walkit._core.lake import NAMESPACE, parse_lake_uri, redact, table_name
from walkit.errors import ConfigurationError

__all__ = ["PROBE_PREFIX", "LakeUnreachable", "check_lake"]

#: The name of the probe object a check writes at the lake's root, then deletes (not a data
#: file's name: an offloader's sweep never takes it for one).
PROBE_PREFIX: Final = ".walkit-cluster-check-"


class LakeUnreachable(Exception):
    """Why a lake failed its check (a message without secrets)."""


def check_lake(
    uri: str,
    catalog: Mapping[str, str] | None,
    logs: Sequence[str],
    timeout: float,
    stage: list[str] | None = None,
) -> None:
    """Raise LakeUnreachable (or ConfigurationError for a lake URI or catalog that cannot
    work) saying why the lake at ``uri`` cannot serve the ``logs`` offloaded to it.
    ``stage`` gets the step under way appended (what a caller that gives up waiting names)."""
    from walkit.lake import check_available

    check_available()
    lake = parse_lake_uri(uri)
    given = catalog is not None
    if catalog is None:
        if lake.scheme != "file":
            raise ConfigurationError(
                f"an {lake.scheme}:// lake needs its catalog's properties (--lake-catalog)"
            )
        catalog = {
            "type": "sql",
            "uri": f"sqlite:///{lake.root}/catalog.db",
            "warehouse": str(lake),
        }
    props = dict(catalog)
    # pyarrow's S3 client waits minutes by default; the check is bounded.
    props.setdefault("s3.connect-timeout", str(timeout))
    props.setdefault("s3.request-timeout", str(timeout))
    try:
        _check(uri, props, logs, given, [] if stage is None else stage)
    except LakeUnreachable as exc:
        raise LakeUnreachable(redact(str(exc), props)) from None
    except ConfigurationError as exc:
        raise ConfigurationError(redact(str(exc), props)) from None
    except Exception as exc:  # pyiceberg's, pyarrow's, the catalog's own (SQL, HTTP)
        raise LakeUnreachable(redact(_say(exc), props)) from None


def _check(
    uri: str, props: dict[str, str], logs: Sequence[str], given: bool, stage: list[str]
) -> None:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import PyArrowFileIO

    lake = parse_lake_uri(uri)
    if lake.scheme == "file":
        # (before the catalog: loading a SQL catalog creates its file and tables)
        if not os.path.isdir(lake.root):
            raise LakeUnreachable(f"directory {lake.root} does not exist")
        if not given and logs and not os.path.isfile(f"{lake.root}/catalog.db"):
            raise LakeUnreachable(f"catalog {lake.root}/catalog.db does not exist")
    stage.append("storage")
    io = load_file_io(props, uri)
    if not isinstance(io, PyArrowFileIO):
        raise ConfigurationError("the lake's FileIO must be pyiceberg's PyArrowFileIO")
    scheme, netloc, path = PyArrowFileIO.parse_location(uri)
    filesystem = io.fs_by_scheme(scheme, netloc)
    try:
        filesystem.get_file_info(path)
    except OSError as exc:
        raise LakeUnreachable(f"storage: {_say(exc)}") from None
    probe = lake.join(f"{PROBE_PREFIX}{secrets.token_hex(8)}")
    try:
        with io.new_output(probe).create(overwrite=True) as out:
            out.write(b"walkit cluster check\n")
        io.delete(probe)
    except OSError as exc:
        raise LakeUnreachable(f"storage refused a write: {_say(exc)}") from None
    stage.append("catalog")
    try:
        found = load_catalog("walkit", **props)
    except Exception as exc:
        raise LakeUnreachable(f"catalog: {_say(exc)}") from None
    for log_name in logs:
        identifier = (NAMESPACE, table_name(log_name))
        stage.append(f"log {log_name}: table {'.'.join(identifier)}")
        try:
            found.load_table(identifier)
        except NoSuchTableError:
            raise LakeUnreachable(
                f"log {log_name}: table {'.'.join(identifier)} is not in the catalog"
            ) from None
        except Exception as exc:
            raise LakeUnreachable(
                f"log {log_name}: table {'.'.join(identifier)}: {_say(exc)}"
            ) from None


def _say(exc: BaseException) -> str:
    """An exception in one line: its class and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
