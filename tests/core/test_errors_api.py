"""The error hierarchy: its export lists, and what every class promises (pinned).

The tables below were taken from the hierarchy before it gained its bases (retry later, lost
ownership, usage, data, not found): those bases must not change any class's ``retryable``, its
wire code, or a base a program may test with ``isinstance``.
"""

from __future__ import annotations

import pytest

import walkit
import walkit_bookie
from walkit import errors

#: Each class's ``retryable``, as it was before the bases came.
RETRYABLE = {
    "AuthenticationError": False,
    "BadRequestError": False,
    "BookieIOError": True,
    "BookieReadOnlyError": False,
    "BookieTimeoutError": True,
    "BookieUnavailableError": True,
    "ClientClosedError": False,
    "ClusterRunningError": False,
    "ConfigurationError": False,
    "ConsumerBackloggedError": False,
    "CookieError": False,
    "CorruptEntryError": False,
    "CorruptLakeFileError": False,
    "DigestMismatchError": True,
    "DuplicateRecordError": False,
    "EntryExistsError": False,
    "ForkedProcessError": False,
    "FrameTooLargeError": False,
    "IncompatibleSchemaError": False,
    "InvalidArgumentError": False,
    "InvalidMetadataError": False,
    "LakeAccessError": False,
    "LakeUnavailableError": True,
    "LedgerClosedError": False,
    "LedgerFencedError": False,
    "LedgerInRecoveryError": False,
    "LedgerRecoveryError": True,
    "LocalProtocolError": False,
    "LogTruncatedError": False,
    "MetadataAccessError": False,
    "MetadataNotEmptyError": False,
    "MetadataStoreError": True,
    "MetadataVersionError": True,
    "NoSuchConsumerError": False,
    "NoSuchEntryError": False,
    "NoSuchLedgerError": False,
    "NoSuchLogError": False,
    "NoSuchNodeError": False,
    "NodeExistsError": False,
    "NodeNotEmptyError": False,
    "NotEnoughBookiesError": True,
    "ProtocolError": False,
    "RemoteProtocolError": False,
    "RereplicationError": True,
    "SchemaError": False,
    "SessionExpiredError": False,
    "TLSError": False,
    "TooManyRequestsError": True,
    "UnauthorizedAccessError": False,
    "UnsupportedVersionError": False,
    "WalkitError": False,
    "WriterFencedError": False,
    "WrongEventLoopError": False,
}

#: Each class's direct bases before the tree: each must stay a base (directly or not).
OLD_BASES = {
    "AuthenticationError": ("BookieUnavailableError",),
    "BadRequestError": ("RemoteProtocolError",),
    "BookieIOError": ("WalkitError",),
    "BookieReadOnlyError": ("WalkitError",),
    "BookieTimeoutError": ("WalkitError",),
    "BookieUnavailableError": ("WalkitError",),
    "ClientClosedError": ("WalkitError",),
    "ClusterRunningError": ("WalkitError",),
    "ConfigurationError": ("WalkitError",),
    "ConsumerBackloggedError": ("LogTruncatedError",),
    "CookieError": ("WalkitError",),
    "CorruptEntryError": ("WalkitError",),
    "CorruptLakeFileError": ("CorruptEntryError",),
    "DigestMismatchError": ("WalkitError",),
    "DuplicateRecordError": ("WalkitError",),
    "EntryExistsError": ("WalkitError",),
    "ForkedProcessError": ("WrongEventLoopError",),
    "FrameTooLargeError": ("RemoteProtocolError",),
    "IncompatibleSchemaError": ("SchemaError",),
    "InvalidArgumentError": ("WalkitError", "ValueError"),
    "InvalidMetadataError": ("WalkitError",),
    "LakeAccessError": ("LakeUnavailableError",),
    "LakeUnavailableError": ("WalkitError",),
    "LedgerClosedError": ("WalkitError",),
    "LedgerFencedError": ("WalkitError",),
    "LedgerInRecoveryError": ("WalkitError",),
    "LedgerRecoveryError": ("WalkitError",),
    "LocalProtocolError": ("ProtocolError",),
    "LogTruncatedError": ("NoSuchEntryError",),
    "MetadataAccessError": ("MetadataStoreError",),
    "MetadataNotEmptyError": ("NodeExistsError",),
    "MetadataStoreError": ("WalkitError",),
    "MetadataVersionError": ("WalkitError",),
    "NoSuchConsumerError": ("NoSuchNodeError",),
    "NoSuchEntryError": ("WalkitError",),
    "NoSuchLedgerError": ("WalkitError",),
    "NoSuchLogError": ("NoSuchNodeError",),
    "NoSuchNodeError": ("WalkitError",),
    "NodeExistsError": ("WalkitError",),
    "NodeNotEmptyError": ("WalkitError",),
    "NotEnoughBookiesError": ("WalkitError",),
    "ProtocolError": ("WalkitError",),
    "RemoteProtocolError": ("ProtocolError",),
    "RereplicationError": ("LedgerRecoveryError",),
    "SchemaError": ("WalkitError",),
    "SessionExpiredError": ("MetadataStoreError",),
    "TLSError": ("BookieUnavailableError",),
    "TooManyRequestsError": ("WalkitError",),
    "UnauthorizedAccessError": ("WalkitError",),
    "UnsupportedVersionError": ("RemoteProtocolError",),
    "WalkitError": ("Exception",),
    "WriterFencedError": ("LedgerFencedError",),
    "WrongEventLoopError": ("WalkitError", "RuntimeError"),
}

#: The wire's status codes and the class each one builds.
WIRE = {
    1: "NoSuchEntryError",
    2: "NoSuchLedgerError",
    3: "LedgerFencedError",
    4: "UnauthorizedAccessError",
    5: "TooManyRequestsError",
    6: "BookieReadOnlyError",
    7: "BadRequestError",
    8: "BookieIOError",
    9: "UnsupportedVersionError",
    10: "LedgerClosedError",
    11: "DigestMismatchError",
    12: "NotEnoughBookiesError",
    13: "BookieTimeoutError",
    14: "BookieUnavailableError",
    15: "MetadataVersionError",
    16: "MetadataStoreError",
    17: "NodeExistsError",
    18: "NoSuchNodeError",
    19: "LedgerRecoveryError",
    20: "LedgerInRecoveryError",
    21: "WriterFencedError",
    22: "CookieError",
    23: "SessionExpiredError",
    24: "ClientClosedError",
    25: "NodeNotEmptyError",
    26: "EntryExistsError",
    30: "TLSError",
    31: "AuthenticationError",
}


BUILTIN_BASES: dict[str, type[BaseException]] = {
    "Exception": Exception,
    "ValueError": ValueError,
    "RuntimeError": RuntimeError,
}


#: Raised only inside a bookie process: out of ``walkit.__all__``, still importable.
BOOKIE_ONLY = {"CookieError"}


def _classes() -> dict[str, type[errors.WalkitError]]:
    return {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.WalkitError)
    }


def test_every_class_keeps_its_retryable() -> None:
    classes = _classes()
    for name, retryable in RETRYABLE.items():
        assert classes[name].retryable is retryable, name


def test_every_class_keeps_its_bases() -> None:
    classes = _classes()
    for name, bases in OLD_BASES.items():
        for base in bases:
            ancestor = classes.get(base) or BUILTIN_BASES[base]
            assert issubclass(classes[name], ancestor), (name, base)


def test_the_wire_codes_build_the_same_classes() -> None:
    assert {code: cls.__name__ for code, cls in errors._by_code().items()} == WIRE
    for code, name in WIRE.items():
        error = errors.error_for_code(code, "m")
        assert type(error).__name__ == name
        assert error.code == code
        assert str(error) == "m"
    assert type(errors.error_for_code(999)) is errors.RemoteProtocolError


def test_all_names_every_error_class_but_the_bookie_only_ones() -> None:
    classes = set(_classes())
    assert set(errors.__all__) == (classes - BOOKIE_ONLY) | {"error_for_code"}
    assert len(errors.__all__) == len(set(errors.__all__))


def test_every_error_is_reexported_at_the_top_level() -> None:
    for name in errors.__all__:
        assert getattr(walkit, name) is getattr(errors, name)
        assert name in walkit.__all__


def test_bookie_only_errors_left_the_top_level_with_a_warning() -> None:
    for name in BOOKIE_ONLY:
        assert name not in walkit.__all__
        assert name not in vars(walkit)  # so that the old spelling goes through the warning
        with pytest.warns(DeprecationWarning, match=f"walkit.{name} is raised only by the bookie"):
            old = getattr(walkit, name)
        assert old is getattr(errors, name)
    with pytest.warns(DeprecationWarning):
        from walkit import CookieError
    assert CookieError is errors.CookieError
    assert walkit_bookie.CookieError is errors.CookieError


#: Each base, and the classes it must catch (with their subclasses).
BASES: dict[type[errors.WalkitError], set[str]] = {
    errors.RetryLaterError: {
        "AuthenticationError",
        "BookieIOError",
        "BookieTimeoutError",
        "BookieUnavailableError",
        "LakeAccessError",
        "LakeUnavailableError",
        "LedgerRecoveryError",
        "MetadataAccessError",
        "MetadataStoreError",
        "MetadataVersionError",
        "NotEnoughBookiesError",
        "RereplicationError",
        "SessionExpiredError",
        "TLSError",
        "TooManyRequestsError",
    },
    errors.OwnershipLostError: {
        "LedgerFencedError",
        "LedgerInRecoveryError",
        "SessionExpiredError",
        "WriterFencedError",
    },
    errors.UsageError: {
        "AuthenticationError",
        "ClientClosedError",
        "ConfigurationError",
        "ForkedProcessError",
        "InvalidArgumentError",
        "LakeAccessError",
        "MetadataAccessError",
        "TLSError",
        "UnauthorizedAccessError",
        "WrongEventLoopError",
    },
    errors.DataError: {
        "CorruptEntryError",
        "CorruptLakeFileError",
        "DigestMismatchError",
        "EntryExistsError",
        "IncompatibleSchemaError",
        "InvalidMetadataError",
        "SchemaError",
    },
    errors.NotFoundError: {
        "ConsumerBackloggedError",
        "LogTruncatedError",
        "NoSuchConsumerError",
        "NoSuchEntryError",
        "NoSuchLedgerError",
        "NoSuchLogError",
        "NoSuchNodeError",
    },
}

#: Errors under none of the bases: protocol errors (a bug or a bad peer), conflicts in the
#: metadata, and the bookie's and the operator's own.
UNDER_NO_BASE = {
    "BadRequestError",
    "BookieReadOnlyError",
    "ClusterRunningError",
    "CookieError",
    "DuplicateRecordError",
    "FrameTooLargeError",
    "LedgerClosedError",
    "LocalProtocolError",
    "MetadataNotEmptyError",
    "NodeExistsError",
    "NodeNotEmptyError",
    "ProtocolError",
    "RemoteProtocolError",
    "UnsupportedVersionError",
}


def test_each_base_catches_exactly_its_classes() -> None:
    classes = _classes()
    for base, members in BASES.items():
        caught = set()
        for name, cls in classes.items():
            try:
                raise cls("x")
            except base:
                caught.add(name)
            except errors.WalkitError:
                pass
        assert caught - {base.__name__} == members, base.__name__
    placed = set().union(*BASES.values()) | {b.__name__ for b in BASES}
    assert set(classes) - placed - {"WalkitError"} == UNDER_NO_BASE


def test_retry_later_means_retryable_but_for_ownership_and_usage() -> None:
    for cls in _classes().values():
        if issubclass(cls, errors.RetryLaterError):
            expected = not issubclass(cls, (errors.OwnershipLostError, errors.UsageError))
            assert cls.retryable is expected, cls.__name__
        elif cls.retryable:
            assert cls is errors.DigestMismatchError  # the one retryable error outside it


def test_the_bases_are_walkit_errors_without_codes() -> None:
    for base in BASES:
        assert base.__name__ in errors.__all__
        assert getattr(walkit, base.__name__) is base
        assert base.__bases__ == (errors.WalkitError,)
        assert "code" not in vars(base)
