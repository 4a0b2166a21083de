"""Command-line arguments made from option declarations (``walkit._core.options``).

:func:`add_options` adds a flag per declared option of an options class (``walkit-bookie``'s
are all of ``BookieConfig``'s); :func:`add_option` one, under a command's own flag (``walkit
log retain --records`` is ``LogOptions.retain_records``). Each flag reads its text and checks
it as the option's kind says, so bad text is a one-line error (argparse exits 2 with it), never
a traceback, and means what the same value would mean in Python or in a config file. Flags
default to nothing (``argparse.SUPPRESS``): :func:`given` returns only what was given, so
defaults live in the declarations alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from walkit._core.options import SECONDS, Kind, Option, count, declared

__all__ = ["add_option", "add_options", "argument_type", "at_least", "given", "help_for", "seconds"]


def argument_type(kind: Kind, what: str = "") -> Callable[[str], Any]:
    """An argparse ``type`` reading text as ``kind`` (``what`` names the value in errors)."""
    label = f"{what} " if what else ""

    def parse(text: str) -> Any:
        try:
            return kind.from_text(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{label}{exc}") from None

    return parse


def at_least(minimum: int, what: str = "") -> Callable[[str], int]:
    """An int type refusing values below ``minimum``."""
    return argument_type(count(minimum), what)


#: A finite number of seconds >= 0.
seconds: Callable[[str], float] = argument_type(SECONDS)


def _shown_default(field: attrs.Attribute[Any], option: Option) -> str | None:
    default = option.command_default
    if default is attrs.NOTHING:
        default = field.default
    if isinstance(default, attrs.Factory) or default is attrs.NOTHING or default is None:  # type: ignore[arg-type]  # attrs.Factory is a class
        return None
    if option.kind.switch:
        return None
    return option.kind.show(default)


def help_for(field: attrs.Attribute[Any], option: Option) -> str:
    """The option's help with its default, as argparse prints it (``%`` escaped)."""
    text = option.help
    shown = _shown_default(field, option)
    if shown is not None:
        text = f"{text} (default {shown})"
    return text.replace("%", "%%")


def add_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    name: str,
    *flags: str,
    **overrides: Any,
) -> None:
    """Add the flag of ``cls``'s option ``name`` (``flags``: other spellings than its own;
    ``overrides``: other ``add_argument`` settings, such as a command's own help)."""
    for field, option in declared(cls):
        if field.name == name:
            _add(parser, field, option, flags or option.flags_for(name), overrides)
            return
    raise KeyError(f"{cls.__name__} declares no option {name!r}")


def add_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type) -> None:
    """Add a flag for every declared option of ``cls`` that has one."""
    for field, option in declared(cls):
        flags = option.flags_for(field.name)
        if flags:
            _add(parser, field, option, flags, {})


def _add(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    field: attrs.Attribute[Any],
    option: Option,
    flags: tuple[str, ...],
    overrides: Mapping[str, Any],
) -> None:
    kind = option.kind
    settings: dict[str, Any] = {
        "dest": field.name,
        "default": argparse.SUPPRESS,
        "help": help_for(field, option),
    }
    if kind.switch:
        default = (
            field.default if option.command_default is attrs.NOTHING else (option.command_default)
        )
        settings.update(action="store_const", const=not default)
    else:
        settings["metavar"] = option.metavar
        if kind.repeated:
            settings["action"] = "append"
        elif kind.choices is not None:
            settings.update(choices=kind.choices, metavar=None)
        else:
            settings["type"] = argument_type(kind)
    settings.update(overrides)
    parser.add_argument(*flags, **settings)


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The options of ``cls`` given on the command line (flags left out are not there)."""
    return {
        field.name: getattr(args, field.name)
        for field, _ in declared(cls)
        if hasattr(args, field.name)
    }
