"""The connection options go before or after every `walkit` command, as etcdctl, kubectl and
the bookkeeper shell take them: the commands are found by walking the parser itself, so a new
command is checked without being listed here."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator

import pytest

from tests._sandbox import Sandbox
from tests.cli._run import walkit
from walkit._cli._connect import ConnectionOptions, check_connection_options, connection
from walkit._core.options import declared
from walkit.cli import build_parser

#: A value for every connection option (files need not exist: only parsing is checked here).
GIVEN = {
    "metadata": "zk://127.0.0.1:2181/walkit",
    "placement": "rackaware",
    "tls_ca": "ca.pem",
    "tls_cert": "client.pem",
    "tls_key": "client.key",
    "auth_token_file": "token",
}
#: The commands that take fewer than all of them: the sandbox starts its own cluster (its
#: --metadata is where), and `metadata` commands name their stores as arguments.
FEWER = {
    "sandbox": {"metadata"},
    "metadata export": set(),
    "metadata import": set(),
    "metadata migrate": set(),
}
#: Values a command's own required arguments accept, tried in order.
SAMPLES = ("1", "127.0.0.1:3181", "x")


def _flag(name: str) -> str:
    for field, option in declared(ConnectionOptions):
        if field.name == name:
            return option.flags_for(name)[0]
    raise KeyError(name)


def _flags(names: set[str] | frozenset[str] | list[str]) -> list[str]:
    return [text for name in sorted(names) for text in (_flag(name), GIVEN[name])]


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:  # type: ignore[type-arg]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(words, parser) of every command that runs (not one that only groups others)."""
    sub = _subparsers(parser)
    if sub is None:
        yield words, parser
        return
    for word, child in sub.choices.items():
        yield from _commands(child, (*words, word))


def _sample(action: argparse.Action) -> str:
    if action.choices:
        return str(next(iter(action.choices)))
    for text in SAMPLES:
        try:
            if callable(action.type):
                action.type(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        return text
    raise AssertionError(f"no sample value for {action.dest}")


def _own_arguments(parser: argparse.ArgumentParser) -> list[str]:
    """Values for the command's required options and its positionals."""
    argv: list[str] = []
    for action in parser._actions:
        if action.option_strings and action.required:
            argv += [action.option_strings[0], _sample(action)]
    for action in parser._actions:
        if not action.option_strings and action.nargs not in ("?", "*"):
            argv.append(_sample(action))
    return argv


COMMANDS = dict(_commands(build_parser()))


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(words) for words in COMMANDS}
    assert {"bookies", "ledger show", "log tail", "autorecovery delay", "cluster check"} <= names
    assert set(FEWER) <= names


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ConnectionOptions.ENVIRONMENT.values():
        monkeypatch.delenv(variable, raising=False)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_connection_options(parser, args)
    return args


@pytest.mark.parametrize("words", list(COMMANDS), ids=" ".join)
def test_connection_options_before_or_after_the_command_are_the_same(
    words: tuple[str, ...],
) -> None:
    names = FEWER.get(" ".join(words), set(GIVEN))
    own = _own_arguments(COMMANDS[words])
    before = connection(_parse([*_flags(names), *words, *own]))
    after = connection(_parse([*words, *own, *_flags(names)]))
    assert before == after == ConnectionOptions(**{n: GIVEN[n] for n in names})
    if names:  # both: the later one wins, as for any repeated flag
        name = sorted(names)[0]
        both = _parse([_flag(name), "early", *words, *own, _flag(name), "late"])
        assert getattr(connection(both), name) == "late"


@pytest.mark.parametrize(
    "words", [w for w in COMMANDS if set(GIVEN) - FEWER.get(" ".join(w), set(GIVEN))], ids=" ".join
)
def test_an_option_a_command_does_not_take_is_a_usage_error_in_either_position(
    words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    name = sorted(set(GIVEN) - FEWER[" ".join(words)])[0]
    own = _own_arguments(COMMANDS[words])
    for argv in (
        [_flag(name), GIVEN[name], *words, *own],
        [*words, *own, _flag(name), GIVEN[name]],
    ):
        with pytest.raises(SystemExit) as exited:
            _parse(argv)
        assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"{_flag(name)} does not apply to the '{words[0]}' command" in err


def test_the_environment_stands_under_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WALKIT_METADATA", "sqlite:///from-env.db")
    monkeypatch.setenv("WALKIT_TLS_CA", "env-ca.pem")
    options = connection(_parse(["--tls-ca", "flag-ca.pem", "bookies"]))
    assert options.metadata == "sqlite:///from-env.db"
    assert options.tls_ca == "flag-ca.pem"


@pytest.mark.processes
def test_metadata_before_the_command_against_a_real_sandbox(walkit_sandbox: Sandbox) -> None:
    url = walkit_sandbox.metadata_url
    before = walkit("--metadata", url, "bookies", "--json")
    after = walkit("bookies", "--json", "--metadata", url)
    assert before.returncode == 0, before.stderr
    assert after.returncode == 0, after.stderr
    listed = json.loads(before.stdout)
    assert len(listed) == 3 and {b["state"] for b in listed} == {"writable"}
    assert [b["bookie"] for b in listed] == [b["bookie"] for b in json.loads(after.stdout)]
    nested = walkit("--metadata", url, "log", "list")
    assert nested.returncode == 0, nested.stderr
