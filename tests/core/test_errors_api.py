"""The error hierarchy: its export lists, and what every class promises (pinned).

The tables below were taken from the hierarchy before it gained its bases (retry later, lost
ownership, usage, data, not found): those bases must not change any class's ``retryable``, its
wire code, or a base a program may test with ``isinstance``.
"""

from __future__ import annotations

import walkit
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


def test_all_names_every_error_class_and_nothing_else() -> None:
    classes = set(_classes())
    assert set(errors.__all__) == classes | {"error_for_code"}
    assert len(errors.__all__) == len(set(errors.__all__))


def test_every_error_is_reexported_at_the_top_level() -> None:
    for name in errors.__all__:
        assert getattr(walkit, name) is getattr(errors, name)
        assert name in walkit.__all__
