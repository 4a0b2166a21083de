"""Ledger metadata (BookKeeper's protocol document): the model, its state transitions and its
serialization.

Serialized as readable JSON with a format version, so operators can read it with any ZooKeeper
or sqlite tool::

    {"format": 1, "ensemble_size": 3, "write_quorum": 2, "ack_quorum": 2, "state": "OPEN",
     "last_entry_id": -1, "length": 0, "digest": "crc32c", "password_sha256": "...",
     "password": "base64", "fragments": [[0, ["127.0.0.1:3181", ...]], ...],
     "custom": {"k": "base64"}, "ctime_ms": ...}

The id is not stored in the value: it is the node's path.

``password`` (optional) is the ledger's password itself, kept for administrative opens
(autorecovery, ``walkit recover``), as BookKeeper keeps it in its ledger metadata
(``LedgerMetadata.hasPassword()``); it is absent from ledgers whose creator opted out
(``store_password=False``) and from ledgers written before it existed. It is an optional key
of format 1, not a new format: readers that predate it ignore keys they do not know, so they
still read every ledger; if one of them rewrites a ledger (an ensemble change, a close), the
key is dropped and the ledger is rereplicated as before it existed (with the passwords autorecovery
knows), which loses nothing.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, final

import attrs

from walkit._core.digest import DigestType
from walkit._core.types import INVALID_ENTRY_ID, BookieId
from walkit.errors import InvalidArgumentError, InvalidMetadataError

FORMAT_VERSION = 1


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


def validate_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """Refuse anything but E >= Qw >= Qa >= 1."""
    for name, value in (
        ("ensemble_size", ensemble_size),
        ("write_quorum", write_quorum),
        ("ack_quorum", ack_quorum),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgumentError(f"{name} must be an int, not {value!r}")
    if not ensemble_size >= write_quorum >= ack_quorum >= 1:
        raise InvalidArgumentError(
            f"need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
            f"E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}"
        )


#: Prefix of the salted password hash (format 2). Format 1, written before it, is 64 hex
#: digits: an unsalted SHA-256; ledgers that have one still open with the right password.
PASSWORD_HASH_V2 = "v2$"
PASSWORD_SALT_SIZE = 16


def legacy_password_hash(password: bytes) -> str:
    """Format 1: unsalted (equal passwords give equal hashes across ledgers). Read only."""
    return hashlib.sha256(b"walkit-password\x00" + password).hexdigest()


def password_hash(password: bytes, salt: bytes) -> str:
    """Format 2: ``v2$<salt hex>$<HMAC-SHA256(salt, password) hex>``, a fresh salt per ledger.

    A fast keyed hash, not a slow KDF, on purpose: the master key that clients send to the
    bookies is a SHA-256 of the password, so a slow hash here would not make a guessed
    password dearer to check; the salt stops one table of guesses from serving every ledger.
    """
    if len(salt) < 8:
        raise InvalidArgumentError("a password salt needs at least 8 bytes")
    digest = hmac.new(salt, b"walkit-password\x00" + password, hashlib.sha256).hexdigest()
    return f"{PASSWORD_HASH_V2}{salt.hex()}${digest}"


def password_matches(stored: str, password: bytes) -> bool:
    """Whether ``password`` is the one ``stored`` (format 1 or 2) was made from. An empty
    ``stored`` (metadata written without a hash) matches nothing."""
    if stored.startswith(PASSWORD_HASH_V2):
        salt_hex, sep, _ = stored[len(PASSWORD_HASH_V2) :].partition("$")
        try:
            salt = bytes.fromhex(salt_hex)
        except ValueError:
            return False
        if not sep or len(salt) < 8:
            return False
        return hmac.compare_digest(password_hash(password, salt), stored)
    if len(stored) == 64:
        return hmac.compare_digest(legacy_password_hash(password), stored)
    return False


def admin_password(metadata: LedgerMetadata, known: Iterable[bytes]) -> bytes | None:
    """The password an administrative open of the ledger uses (autorecovery, ``walkit
    recover``), as BookKeeper's AutoRecovery takes the one in the metadata when
    ``hasPassword()`` and else its configured one: the stored password when its hash checks,
    else the first of ``known`` that matches the hash; None when none does.

    A stored password that does not match the hash (metadata edited by hand) is passed over:
    the bookies would refuse its master key. A ledger whose metadata has no hash (written
    before hashes) takes its stored password, else b"" (the client's default).
    """
    stored, hashed = metadata.password, metadata.password_sha256
    if stored is not None and (not hashed or password_matches(hashed, stored)):
        return stored
    if not hashed:
        return b""
    for password in known:
        if password_matches(hashed, password):
            return password
    return None


@final
@attrs.frozen
class LedgerMetadata:
    """Everything the metadata store knows about one ledger. Immutable: updates make a copy."""

    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    #: Ordered by first entry: first_entry -> the ensemble that stores entries from there on.
    fragments: tuple[tuple[int, tuple[BookieId, ...]], ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = INVALID_ENTRY_ID
    length: int = 0
    digest: DigestType = DigestType.CRC32C
    password_sha256: str = ""
    custom_metadata: Mapping[str, bytes] = attrs.field(factory=dict)
    ctime_ms: int = 0
    #: The password, for administrative opens (None: not stored). Never in a repr.
    password: bytes | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        validate_quorums(self.ensemble_size, self.write_quorum, self.ack_quorum)
        if self.password is not None and not isinstance(self.password, bytes):
            raise InvalidMetadataError(f"ledger {self.ledger_id}: the stored password is not bytes")
        if not self.fragments:
            raise InvalidMetadataError(f"ledger {self.ledger_id}: no fragments")
        previous = -1
        for first, ensemble in self.fragments:
            if first <= previous and not (first == 0 and previous == -1):
                raise InvalidMetadataError(f"ledger {self.ledger_id}: fragments out of order")
            if len(ensemble) != self.ensemble_size:
                raise InvalidMetadataError(
                    f"ledger {self.ledger_id}: fragment at {first} has {len(ensemble)} bookies, "
                    f"expected {self.ensemble_size}"
                )
            if len(set(ensemble)) != len(ensemble):
                raise InvalidMetadataError(
                    f"ledger {self.ledger_id}: duplicate bookie in fragment at {first}"
                )
            previous = first
        if self.fragments[0][0] != 0:
            raise InvalidMetadataError(
                f"ledger {self.ledger_id}: first fragment must start at entry 0"
            )

    # --- queries ------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def has_password(self) -> bool:
        """Whether the metadata keeps the ledger's password (BookKeeper's ``hasPassword()``)."""
        return self.password is not None

    @property
    def ensembles(self) -> dict[int, list[BookieId]]:
        """``{first_entry: [BookieId, ...]}`` ordered by first entry (the design's ``fragments``)."""
        return {first: list(ensemble) for first, ensemble in self.fragments}

    @property
    def current_ensemble(self) -> tuple[BookieId, ...]:
        return self.fragments[-1][1]

    @property
    def last_fragment_first_entry(self) -> int:
        return self.fragments[-1][0]

    def ensemble_for(self, entry_id: int) -> tuple[BookieId, ...]:
        """The ensemble of the fragment that holds ``entry_id``."""
        chosen = self.fragments[0][1]
        for first, ensemble in self.fragments:
            if first > entry_id:
                break
            chosen = ensemble
        return chosen

    def all_bookies(self) -> set[BookieId]:
        return {b for _, ensemble in self.fragments for b in ensemble}

    # --- transitions (each returns a new object; the caller CASes it) -------------------------

    def with_state(self, state: LedgerState) -> LedgerMetadata:
        return attrs.evolve(self, state=state)

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        """CLOSED at ``last_entry_id``; fragments starting after it are dropped (they are empty)."""
        fragments = tuple(f for f in self.fragments if f[0] <= max(last_entry_id, 0))
        return attrs.evolve(
            self,
            state=LedgerState.CLOSED,
            last_entry_id=last_entry_id,
            length=length,
            fragments=fragments,
        )

    def with_fragment(self, first_entry: int, ensemble: Sequence[BookieId]) -> LedgerMetadata:
        """Start a new fragment at ``first_entry`` (replacing a last fragment that starts there)."""
        kept = tuple(f for f in self.fragments if f[0] < first_entry)
        if not kept and first_entry != 0:
            raise InvalidMetadataError("new fragment would leave entries without an ensemble")
        return attrs.evolve(self, fragments=(*kept, (first_entry, tuple(ensemble))))

    # --- serialization ------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "state": self.state.value,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "digest": self.digest.value,
            "password_sha256": self.password_sha256,
            "fragments": [
                [first, [str(b) for b in ensemble]] for first, ensemble in self.fragments
            ],
            "custom": {
                k: base64.b64encode(v).decode("ascii")
                for k, v in sorted(self.custom_metadata.items())
            },
            "ctime_ms": self.ctime_ms,
        }
        if self.password is not None:
            doc["password"] = base64.b64encode(self.password).decode("ascii")
        return json.dumps(doc, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, ledger_id: int, data: bytes) -> LedgerMetadata:
        """Parse stored metadata; anything malformed raises InvalidMetadataError."""
        try:
            doc = json.loads(data.decode("utf-8"))
            if not isinstance(doc, dict):
                raise TypeError("not a JSON object")
            if doc.get("format") != FORMAT_VERSION:
                raise InvalidMetadataError(
                    f"ledger {ledger_id}: unsupported metadata format {doc.get('format')!r}"
                )
            fragments = tuple(
                (int(first), tuple(BookieId.parse(b) for b in ensemble))
                for first, ensemble in doc["fragments"]
            )
            custom = {
                str(k): base64.b64decode(v, validate=True) for k, v in doc.get("custom", {}).items()
            }
            stored = doc.get("password")
            if stored is not None and not isinstance(stored, str):
                raise TypeError(
                    f"the stored password is not a base64 string (a {type(stored).__name__})"
                )
            return cls(
                ledger_id=ledger_id,
                ensemble_size=_int(doc["ensemble_size"]),
                write_quorum=_int(doc["write_quorum"]),
                ack_quorum=_int(doc["ack_quorum"]),
                fragments=fragments,
                state=LedgerState(doc["state"]),
                last_entry_id=_int(doc["last_entry_id"]),
                length=_int(doc["length"]),
                digest=DigestType(doc["digest"]),
                password_sha256=str(doc.get("password_sha256", "")),
                custom_metadata=custom,
                ctime_ms=_int(doc.get("ctime_ms", 0)),
                password=None if stored is None else base64.b64decode(stored, validate=True),
            )
        except InvalidMetadataError:
            raise
        except (InvalidArgumentError, ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
            raise InvalidMetadataError(f"ledger {ledger_id}: malformed metadata: {exc}") from exc


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value
