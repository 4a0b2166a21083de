"""The command-line declarations ``walkit`` and ``walkit-bookie`` share: options declared once
(flag, check and help) and added to a parser, and whether the user gave an option. Part of
:mod:`walkit.shared`: not an API for applications."""

from walkit._cli._args import add_options, given

__all__ = ["add_options", "given"]
