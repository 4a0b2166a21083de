"""How every `walkit` subcommand connects: the metadata URL, the placement policy, TLS to the
bookies (``--tls-ca/--tls-cert/--tls-key``, or the ``WALKIT_TLS_*`` variables that ``walkit
sandbox --tls`` prints), and the token for bookies that authenticate clients
(``--auth-token-file`` or ``WALKIT_AUTH_TOKEN_FILE``).

The options are declared once, in :class:`ConnectionOptions`. :func:`add_connection_options`
puts them on the ``walkit`` parser (before the command, as etcdctl and kubectl take them) and
on every command that connects (after it); both default to nothing, so the one given stands,
and given twice the later one wins. :func:`connection` reads them back with the environment
under them.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Collection
from typing import Any, ClassVar, Final, final

import attrs

from walkit._cli._args import add_option, add_options, given
from walkit._core.auth import TokenAuth
from walkit._core.options import TEXT, declared, optional
from walkit.errors import AuthenticationError, WalkitError
from walkit.net import TLSConfig
from walkit.net._auth import read_token_file

__all__ = [
    "ACCEPTED",
    "ALL_NAMES",
    "AUTH_TOKEN_ENV",
    "CONNECTION_GROUP",
    "TLS_ENV",
    "ConnectionOptions",
    "accept_connection_options",
    "add_connection_options",
    "check_connection_options",
    "connect_options",
    "connection",
    "describe_error",
    "read_token_file",
]

_OPTIONAL_TEXT = optional(TEXT)
#: A policy's name, shown quoted in help: "(default 'default')".
_POLICY = attrs.evolve(TEXT, metavar="POLICY", show=repr)

AUTH_TOKEN_ENV: Final = "WALKIT_AUTH_TOKEN_FILE"

#: Option name -> environment variable giving its default.
TLS_ENV: Final = {
    "tls_ca": "WALKIT_TLS_CA",
    "tls_cert": "WALKIT_TLS_CERT",
    "tls_key": "WALKIT_TLS_KEY",
}

#: The title of the options' group in ``--help``.
CONNECTION_GROUP: Final = "connection (before or after the command)"
#: The namespace attribute naming the connection options the chosen command takes.
ACCEPTED: Final = "connection_options_accepted"


@final
@attrs.frozen(kw_only=True)
class ConnectionOptions:
    """The options of every `walkit` command that talks to a cluster."""

    option_noun: ClassVar[str] = ""
    #: Option name -> the environment variable used when the option is not given.
    ENVIRONMENT: ClassVar[dict[str, str]] = {
        "metadata": "WALKIT_METADATA",
        **TLS_ENV,
        "auth_token_file": AUTH_TOKEN_ENV,
    }

    metadata: str | None = _OPTIONAL_TEXT.field(
        None, "metadata URL (zk://, sqlite:///, memory://); default $WALKIT_METADATA", metavar="URL"
    )
    placement: str = _POLICY.field(
        "default",
        "placement policy: a name (default, rackaware, regionaware), module:Class, "
        "or an entry point's name",
    )
    tls_ca: str | None = _OPTIONAL_TEXT.field(
        None,
        "CA bundle that signs the bookies' certificates (turns TLS on); default $WALKIT_TLS_CA",
        metavar="PEM",
    )
    tls_cert: str | None = _OPTIONAL_TEXT.field(
        None,
        "client certificate, for bookies that ask for one; default $WALKIT_TLS_CERT",
        metavar="PEM",
    )
    tls_key: str | None = _OPTIONAL_TEXT.field(
        None, "the client certificate's key; default $WALKIT_TLS_KEY", metavar="PEM"
    )
    auth_token_file: str | None = _OPTIONAL_TEXT.field(
        None,
        "a file (mode 0600) holding the token for bookies started with --auth token; "
        "default $WALKIT_AUTH_TOKEN_FILE",
        metavar="PATH",
    )


#: Every connection option's name.
ALL_NAMES: Final = frozenset(field.name for field, _ in declared(ConnectionOptions))


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """Every connection option's flag on ``parser`` (the ``walkit`` parser, or a command that
    connects), and the mark that the command takes them all."""
    add_options(parser.add_argument_group(CONNECTION_GROUP), ConnectionOptions)
    accept_connection_options(parser, ALL_NAMES)


def accept_connection_options(
    parser: argparse.ArgumentParser, names: Collection[str], **overrides: Any
) -> None:
    """Mark the command of ``parser`` as taking the connection options ``names``; with
    ``overrides`` (a command's own help), add their flags too."""
    if overrides:
        group = parser.add_argument_group(CONNECTION_GROUP)
        for name in names:
            add_option(group, ConnectionOptions, name, **overrides)
    parser.set_defaults(**{ACCEPTED: frozenset(names)})


def check_connection_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error (exit 2) for a connection option given before a command that does not
    take it (``walkit --tls-ca PEM metadata export ...``), rather than ignoring it."""
    accepted: frozenset[str] = getattr(args, ACCEPTED, frozenset())
    for field, option in declared(ConnectionOptions):
        if hasattr(args, field.name) and field.name not in accepted:
            flag = option.flags_for(field.name)[0]
            command = getattr(args, "command", None)
            parser.error(f"{flag} does not apply to the {command!r} command")


def connection(args: argparse.Namespace) -> ConnectionOptions:
    """The connection options given, over the environment's (an empty variable is unset),
    over the declared defaults."""
    values = given(args, ConnectionOptions)
    for name, variable in ConnectionOptions.ENVIRONMENT.items():
        value = values.pop(name, None) or os.environ.get(variable) or None
        if value is not None:
            values[name] = value
    return ConnectionOptions(**values)


def tls_config(options: ConnectionOptions) -> TLSConfig | None:
    """The TLS settings (None: plain TCP)."""
    if not (options.tls_ca or options.tls_cert or options.tls_key):
        return None
    return TLSConfig(ca=options.tls_ca, cert=options.tls_cert, key=options.tls_key)


def auth_config(options: ConnectionOptions) -> TokenAuth | None:
    """The token from the token file (None: no authentication)."""
    path = options.auth_token_file
    return None if path is None else read_token_file(path)


def connect_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of ``Client.connect`` for a subcommand's options."""
    options = connection(args)
    return {
        "placement": options.placement,
        "wall_clock": time.time,
        "tls": tls_config(options),
        "auth": auth_config(options),
    }


def describe_error(exc: WalkitError) -> str:
    """``exc`` as a subcommand reports it. A bookie's refusal names the library's way to send
    a token; a command line user's way is an option of its own, so it is named too."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, AuthenticationError):
        text += f" (walkit commands: --auth-token-file PATH, or ${AUTH_TOKEN_ENV})"
    return text
