"""Options declared once.

Each option of an options class (``BookieConfig``, ``ClientOptions``, ``LogOptions``,
``AutorecoveryOptions``) is one attrs field: its type and default as attrs has them, and, in
the field's metadata, an :class:`Option`: its :class:`Kind` (what values it takes, how a
command line or a config file spells one), its help and its command-line flag::

    port: int = PORT.field(0, "port to listen on")

The kind's check is the field's validator. A kind that converts (``"zstd"`` to a codec) is
declared with ``attrs.field(converter=..., **KIND.option(...))`` instead, so that type
checkers see what ``__init__`` takes.

Everything else is made from these declarations: keyword checks (:func:`options_from_kwargs`),
command-line parsers (``walkit._cli._args``), the bookie's config file and its docs. So an
option is added, renamed or given another default in one place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, final

import attrs

from walkit._core.rate_limit import check_rate
from walkit.errors import ConfigurationError, WalkitError

__all__ = [
    "BYTE_RATE_LIMIT",
    "FRACTION",
    "FRAME_OVERHEAD",
    "FRAME_SIZE",
    "MAX_FRAME_SIZE",
    "MIN_FRAME_SIZE",
    "NON_NEGATIVE",
    "PER_SECOND",
    "PORT",
    "POSITIVE",
    "RATE",
    "RATE_LIMIT",
    "SECONDS",
    "SIZE",
    "SWITCH",
    "TEXT",
    "THRESHOLD",
    "Kind",
    "Option",
    "choice",
    "count",
    "declared",
    "number",
    "optional",
    "options_from_kwargs",
    "options_mapping",
    "rate_limit",
    "read_int",
    "read_number",
    "read_rate",
    "read_size",
    "show_size",
]

T = TypeVar("T")

#: The key of an :class:`Option` in an attrs field's metadata.
OPTION_KEY = "walkit.option"
#: ``Option.flags`` when the flag is the field's name with dashes (``--max-long-poll``).
DERIVED: tuple[str, ...] = ("(derived)",)


def _never(_value: Any) -> str | None:
    return None


def _text(text: str) -> str:
    return text


@final
@attrs.frozen(kw_only=True)
class Kind:
    """What values an option takes, and how text (a command line, a string in a file) reads
    as one."""

    #: None when the value is good, else what it must be ("must be a positive number").
    problem: Callable[[Any], str | None] = _never
    #: Text to a value; raises ValueError saying what the text is not ("not a size").
    read: Callable[[str], Any] = _text
    #: Turns a value given in Python or in a file into the stored one (None: as it is); it
    #: raises ConfigurationError itself. A field of such a kind names it as ``converter=``.
    convert: Callable[[Any], Any] | None = None
    #: How help shows a value (a default).
    show: Callable[[Any], str] = str
    metavar: str | None = None
    #: The values text may take (argparse checks them and lists them in help).
    choices: tuple[str, ...] | None = None
    #: A switch: the flag takes no value and stores the opposite of the default.
    switch: bool = False
    #: A list: the flag may be repeated (``--data-dir A --data-dir B``).
    repeated: bool = False
    #: A secret (a token): errors do not repeat the value.
    secret: bool = False
    #: For an optional kind, the kind without None: what text and files spell (they leave an
    #: option out for None).
    required: Kind | None = None

    def check(self, value: Any, name: str) -> None:
        """Raise ConfigurationError naming ``name`` when ``value`` is not one of this kind."""
        problem = self.problem(value)
        if problem is not None:
            shown = "" if self.secret else f", not {value!r}"
            raise ConfigurationError(f"{name} {problem}{shown}")

    def validator(self, instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        self.check(value, f"{getattr(instance, 'option_noun', '')}{attribute.name}")

    def from_text(self, text: str) -> Any:
        """The value ``text`` spells, checked; ValueError saying what is wrong."""
        if self.required is not None:
            return self.required.from_text(text)
        return self._checked(self.read(text), text)

    def from_value(self, value: Any) -> Any:
        """A value as a config file gives it (TOML's types), converted and checked: a string
        is read as text when this kind's values are not strings ("256MiB"). ValueError says
        what is wrong."""
        if self.required is not None:
            return self.required.from_value(value)
        if isinstance(value, str) and self.read is not _text:
            return self.from_text(value)
        return self._checked(value, None)

    def _checked(self, value: Any, text: str | None) -> Any:
        """``value`` converted and checked (``text``: what it was read from, for errors)."""
        if self.convert is not None:
            try:
                value = self.convert(value)
            except ConfigurationError as exc:
                raise ValueError(str(exc)) from None
        problem = self.problem(value)
        if problem is None:
            return value
        if self.secret:
            raise ValueError(problem)
        raise ValueError(f"{problem}, not {value!r}" if text is None else f"{text} {problem}")

    def field(
        self,
        default: Any,
        help: str,
        *,
        flags: Sequence[str] | None = None,
        metavar: str | None = None,
        command_default: Any = attrs.NOTHING,
        repr: bool = True,
    ) -> Any:
        """An attrs field declaring an option of this kind with its ``default`` (an
        ``attrs.Factory`` for a mutable one) and help; see :meth:`option` for the rest. Not
        for a kind that converts: type checkers see converters only in ``attrs.field``."""
        if self.convert is not None:
            raise TypeError("a converting kind's option is declared with attrs.field(converter=)")
        declared = self.option(help, flags=flags, metavar=metavar, command_default=command_default)
        return attrs.field(default=default, repr=repr, **declared)

    def option(
        self,
        help: str,
        *,
        flags: Sequence[str] | None = None,
        metavar: str | None = None,
        command_default: Any = attrs.NOTHING,
    ) -> dict[str, Any]:
        """The arguments of ``attrs.field`` that declare an option of this kind: its
        validator and its :class:`Option` (``flags``: the command-line flags, default the
        name with dashes, ``()`` for none; ``command_default``: the default of the command
        where it differs from the class's)."""
        declared = Option(
            kind=self,
            help=help,
            flags=DERIVED if flags is None else tuple(flags),
            metavar=metavar or self.metavar,
            command_default=command_default,
        )
        return {"validator": self.validator, "metadata": {OPTION_KEY: declared}}


@final
@attrs.frozen(kw_only=True)
class Option:
    """An option's declaration, kept in its attrs field's metadata."""

    kind: Kind
    help: str
    flags: tuple[str, ...]
    metavar: str | None
    command_default: Any

    def flags_for(self, name: str) -> tuple[str, ...]:
        if self.flags == DERIVED:
            return (f"--{name.replace('_', '-')}",)
        return self.flags


def declared(cls: type) -> Iterator[tuple[attrs.Attribute[Any], Option]]:
    """The declared options of an attrs class, in order, with their fields."""
    for field in attrs.fields(cls):
        option = field.metadata.get(OPTION_KEY)
        if option is not None:
            if option.kind.convert is not None and field.converter is None:
                raise TypeError(f"{cls.__name__}.{field.name}: name its kind's converter")
            yield field, option


def options_from_kwargs(
    cls: type[T], options: Mapping[str, Any], what: str, base: T | None = None
) -> T:
    """``cls(**options)`` (over ``base``'s values when given: an options object the caller
    passed besides keywords); unknown names and bad values raise ConfigurationError naming
    ``what`` ("client", "log") and the known options."""
    known = {a.name for a in attrs.fields(cls)}  # type: ignore[arg-type]  # cls is attrs
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigurationError(
            f"unknown {what} option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    if base is not None and not isinstance(base, cls):
        raise ConfigurationError(f"options must be a {cls.__name__}, not {type(base).__name__}")
    try:
        if base is not None:
            return attrs.evolve(base, **options)  # type: ignore[misc]  # base is attrs
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"bad {what} option: {exc}") from None


def options_mapping(cls: type[T], base: T | None, kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The keywords for ``cls.from_kwargs``: ``base``'s values (an options object given
    besides keywords) under ``kwargs``."""
    if base is None:
        return kwargs
    if not isinstance(base, cls):
        raise ConfigurationError(f"options must be a {cls.__name__}, not {type(base).__name__}")
    values = {f.name: getattr(base, f.name) for f in attrs.fields(cls)}  # type: ignore[arg-type]  # cls is attrs
    return {**values, **kwargs}


# --- kinds ------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


def read_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def _show_number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:,}" if isinstance(value, int) and value >= 10_000 else str(value)


def number(
    what: str,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    integer: bool = False,
    finite: bool = False,
    metavar: str | None = None,
    read: Callable[[str], Any] | None = None,
    show: Callable[[Any], str] = _show_number,
) -> Kind:
    """Numbers in a range (``what`` says which, after "must be")."""

    def problem(value: Any) -> str | None:
        good = (
            (isinstance(value, int) and not isinstance(value, bool))
            if integer
            else (_is_number(value))
        )
        if good and finite:
            good = math.isfinite(value)
        if good and above is not None:
            good = value > above
        if good and at_least is not None:
            good = value >= at_least
        if good and at_most is not None:
            good = value <= at_most
        return None if good else f"must be {what}"

    default_read = read_int if integer else read_number
    return Kind(
        problem=problem,
        read=read or default_read,
        show=show,
        metavar=metavar or ("N" if integer else "NUMBER"),
    )


def count(at_least: int, metavar: str = "N") -> Kind:
    """Whole numbers from ``at_least``."""
    return number(f"an int >= {at_least}", at_least=at_least, integer=True, metavar=metavar)


_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def read_size(text: str) -> int:
    """Bytes from ``5MiB``, ``512k``, ``1g``, ``4096`` (binary units)."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    multiplier = 1
    if t and t[-1] in _UNITS:
        multiplier = _UNITS[t[-1]]
        t = t[:-1]
    try:
        value = float(t) * multiplier
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a size (e.g. 5MiB, 512k)")
    return int(value)


def show_size(value: Any) -> str:
    """``268435456`` as ``256MiB`` (whole units only)."""
    if isinstance(value, int) and value > 0:
        for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1024)):
            if value % scale == 0:
                return f"{value // scale}{unit}"
    return str(value)


def read_rate(text: str) -> int:
    return read_size(text.strip().lower().removesuffix("/s"))


def _show_rate(value: Any) -> str:
    return "0 (no limit)" if not value else f"{show_size(value)}/s"


def optional(kind: Kind) -> Kind:
    """``kind`` or None (a file or a command line leaves the option out for None)."""

    def problem(value: Any) -> str | None:
        found = None if value is None else kind.problem(value)
        return None if found is None else f"{found} or None"

    return attrs.evolve(kind, problem=problem, required=kind)


def choice(*values: str) -> Kind:
    """One of a few words."""

    def problem(value: Any) -> str | None:
        return None if value in values else f"must be one of {', '.join(values)}"

    return Kind(problem=problem, choices=values, metavar="|".join(values))


def _check_switch(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


#: Numbers > 0 (infinity too: "never").
POSITIVE = number("a positive number", above=0, metavar="SECONDS")
#: Numbers >= 0.
NON_NEGATIVE = number("0 or more", at_least=0, metavar="SECONDS")
#: Finite seconds >= 0.
SECONDS = number("a number of seconds >= 0", at_least=0, finite=True, metavar="SECONDS")
#: Fractions of a whole (of a disk): above 0, up to 1.
FRACTION = number("in (0, 1]", above=0, at_most=1, metavar="FRACTION")
#: Thresholds from 0 (off) to 1.
THRESHOLD = number("in [0, 1]", at_least=0, at_most=1, metavar="FRACTION")
#: TCP ports (0: any free one).
PORT = number("in 0..65535", at_least=0, at_most=65535, integer=True, metavar="PORT")
#: Bytes, > 0, spelled ``5MiB`` or ``512k`` on a command line or in a file.
SIZE = number(
    "a positive whole number of bytes",
    at_least=1,
    integer=True,
    metavar="SIZE",
    read=read_size,
    show=show_size,
)
#: Bytes per second, 0 for no limit, spelled ``64MiB/s``.
RATE = number(
    "a finite number of bytes per second >= 0 (0: no limit)",
    at_least=0,
    finite=True,
    metavar="SIZE/s",
    read=read_rate,
    show=_show_rate,
)
#: Things per second, 0 for no limit.
PER_SECOND = number("a finite number >= 0 (0: no limit)", at_least=0, finite=True, metavar="RATE")
#: Bytes of a frame that are not payload, at most: length, message header, ids, flags, the
#: master key, the entry header and the digest (the largest, HMAC-SHA256), with room to spare.
FRAME_OVERHEAD = 1024
#: The smallest ``max_frame_size`` allowed: the overhead plus 1 KiB of payload.
MIN_FRAME_SIZE = FRAME_OVERHEAD + 1024
#: Frame lengths are 32-bit on the wire.
MAX_FRAME_SIZE = 2**32 - 1
#: The largest frame a client or a bookie sends or accepts.
FRAME_SIZE = number(
    f"an int from {MIN_FRAME_SIZE} (a frame's headers, key and digest take up to "
    f"{FRAME_OVERHEAD} bytes, plus a payload) to {MAX_FRAME_SIZE} (frame lengths are 32-bit)",
    at_least=MIN_FRAME_SIZE,
    at_most=MAX_FRAME_SIZE,
    integer=True,
    metavar="SIZE",
    read=read_size,
    show=show_size,
)


def rate_limit(value: Any) -> float | None:
    """A rate limit as stored: None for none (None or 0 given), else a finite number > 0."""
    try:
        return check_rate(value, "rate limit")
    except WalkitError as exc:
        raise ConfigurationError(str(exc)) from None


#: A copy rate limit in entries per second (0 or None: none).
RATE_LIMIT = Kind(convert=rate_limit, read=read_number, metavar="RATE")
#: A copy rate limit in bytes per second, spelled ``64MiB/s`` (0 or None: none).
BYTE_RATE_LIMIT = Kind(convert=rate_limit, read=read_rate, metavar="SIZE/s")
#: True or False; on a command line, a flag that turns the default around.
SWITCH = Kind(problem=_check_switch, switch=True)
#: Any string.
TEXT = Kind(problem=lambda v: None if isinstance(v, str) else "must be a string", metavar="TEXT")
