"""pyiceberg's and pyarrow's exceptions as walkit's errors (``walkit.errors``), naming the log,
the ledger and the file, and never the catalog's secrets.

- storage or catalog unreachable, failing, or a commit lost too often: LakeUnavailableError
  (retryable: nothing was lost, the next pass finishes);
- access denied: LakeAccessError (credentials or permissions);
- a data file missing or not Parquet when read back: CorruptLakeFileError;
- catalog properties pyiceberg cannot use: ConfigurationError.

pyarrow says what went wrong in an ``OSError`` (``AWS Error ACCESS_DENIED ...`` for S3, an
errno for local files) or an ``ArrowInvalid`` (a ``ValueError``) for bytes that are not
Parquet; the classification reads those.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import Any

from walkit._core.lake import redact
from walkit.errors import (
    ConfigurationError,
    CorruptLakeFileError,
    LakeAccessError,
    LakeUnavailableError,
    WalkitError,
)

__all__ = ["check_catalog", "lake_error"]

#: Modules whose exceptions are the lake's (the catalog's clients included).
_LAKE_MODULES = ("pyiceberg", "pyarrow", "sqlalchemy", "requests", "urllib3", "botocore", "boto3")
#: What pyarrow's S3 errors say (``AWS Error <TYPE>``) when credentials are refused.
_DENIED = (
    "ACCESS_DENIED",
    "AccessDenied",
    "Access Denied",
    "Forbidden",
    "INVALID_ACCESS_KEY_ID",
    "InvalidAccessKeyId",
    "SIGNATURE_DOES_NOT_MATCH",
    "SignatureDoesNotMatch",
    "EXPIRED_TOKEN",
    "ExpiredToken",
)
_MISSING = ("NO_SUCH_KEY", "NoSuchKey", "RESOURCE_NOT_FOUND", "Path does not exist")


def lake_error(
    exc: BaseException,
    *,
    log: str,
    action: str,
    ledger_id: int | None = None,
    file: str | None = None,
    location: str | None = None,
    reading: bool = False,
    properties: Mapping[str, str] | None = None,
) -> BaseException:
    """``exc`` (raised while ``action``, say "offloading" or "reading") as a walkit error; an
    exception that is not the lake's (a bug, a cancellation) is returned as it is. With
    ``reading``, a file that is missing or not Parquet is a CorruptLakeFileError. Raise the
    result ``from None``: pyiceberg's own messages may repeat the catalog's properties."""
    if isinstance(exc, WalkitError) or not isinstance(exc, Exception) or not _is_lake(exc):
        return exc
    where = f"log {log}"
    if ledger_id is not None:
        where += f", ledger {ledger_id}"
    if file is not None:
        where += f", file {file}"
    elif location is not None:
        where += f", at {location}"
    said = redact(_say(exc), properties)
    text = " ".join(str(exc).split())
    if reading and _missing(exc, text):
        return CorruptLakeFileError(
            f"{where}: the data file is missing from the lake ({said})", file, ledger_id
        )
    if reading and _not_parquet(exc):
        return CorruptLakeFileError(
            f"{where}: the data file is not the Parquet file the offload wrote ({said})",
            file,
            ledger_id,
        )
    if isinstance(exc, PermissionError) or any(word in text for word in _DENIED):
        return LakeAccessError(f"{where}: the lake refused access while {action} ({said})")
    if _is_configuration(exc):
        return ConfigurationError(f"{where}: offload_catalog: {said}")
    return LakeUnavailableError(f"{where}: the lake failed while {action} ({said})")


def _is_lake(exc: BaseException) -> bool:
    if isinstance(exc, OSError | ValueError | KeyError):
        return True  # (pyarrow's are builtins: OSError, ArrowInvalid is a ValueError)
    return any(
        c.__module__.split(".")[0] in _LAKE_MODULES for c in type(exc).__mro__ if c is not object
    )


def _missing(exc: BaseException, text: str) -> bool:
    if isinstance(exc, FileNotFoundError):
        return True
    if isinstance(exc, OSError) and exc.errno == errno.ENOENT:
        return True
    return isinstance(exc, OSError) and any(word in text for word in _MISSING)


def _not_parquet(exc: BaseException) -> bool:
    """Bytes that are not (whole) Parquet: pyarrow's ArrowInvalid, or an OSError of its
    decoder (no errno, not an object store's error)."""
    try:
        from pyarrow import ArrowException
    except ImportError:  # pragma: no cover - the lake extra is installed where files are read
        return False
    if isinstance(exc, ArrowException) and not isinstance(exc, OSError):
        return True
    return isinstance(exc, OSError) and exc.errno is None and "AWS Error" not in str(exc)


def _is_configuration(exc: BaseException) -> bool:
    """pyiceberg's word for properties it cannot use (a ValueError naming the catalog or
    property), or a NoSuchPropertyException."""
    name = type(exc).__name__
    if name in ("NoSuchPropertyException", "NotInstalledError"):
        return True
    return type(exc) in (ValueError, KeyError)


def _say(exc: BaseException) -> str:
    """An exception in one line: its class and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def check_catalog(properties: Mapping[str, Any]) -> None:
    """ConfigurationError, without secrets, for catalog properties pyiceberg cannot load (an
    unknown ``type``, a URI it cannot infer a type from, a missing ``uri``); no I/O."""
    from pyiceberg.catalog import (
        _ENV_CONFIG,
        PY_CATALOG_IMPL,
        TYPE,
        CatalogType,
        _check_required_catalog_properties,
        infer_catalog_type,
    )
    from pyiceberg.utils.config import merge_config

    if properties.get(PY_CATALOG_IMPL):
        return
    # (as load_catalog does: ~/.pyiceberg.yaml and PYICEBERG_CATALOG__WALKIT__* under them)
    props: Any = merge_config(_ENV_CONFIG.get_catalog_config("walkit") or {}, dict(properties))
    try:
        given = props.get(TYPE)
        kind = CatalogType(given.lower()) if given else infer_catalog_type("walkit", props)
        if kind is not None:
            _check_required_catalog_properties("walkit", kind, props)
    except ValueError as exc:
        known = ", ".join(t.value for t in CatalogType)
        raise ConfigurationError(
            f"log option offload_catalog: {redact(str(exc), properties)} (type: one of {known}, "
            "or py-catalog-impl)"
        ) from None
