"""Location resolvers: host names -> ``/region/rack`` (the placement-policy guide's
DNSToSwitchMapping).

A resolver answers one entry per name, in order; ``None`` means "unknown here" and the policy
then tries the next source and finally the default rack. Resolvers never raise for a name they
cannot resolve: a failing script is logged and answers ``None``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, final, runtime_checkable

from walkit._logging import get_logger
from walkit.errors import ConfigurationError, InvalidArgumentError
from walkit.placement._topology import normalize_location

log = get_logger(__name__)


@runtime_checkable
class LocationResolver(Protocol):
    """Resolves host names to network locations (``/region/rack``), one answer per name.

    Implementations may also define ``reload()`` to drop cached answers.
    """

    def resolve(self, names: Sequence[str]) -> Sequence[str | None]: ...


#: What PlacementResources.resolver may be: a resolver object or a plain function.
ResolverLike = LocationResolver | Callable[[list[str]], Sequence[str | None]]


@final
class StaticLocationResolver:
    """A fixed mapping of host name -> location, from a dict or a file.

    File formats: a JSON object ``{"host": "/region/rack"}``, or lines ``host /region/rack``
    (whitespace separated; blank lines and ``#`` comments ignored).
    """

    def __init__(self, mapping: Mapping[str, str]) -> None:
        if not isinstance(mapping, Mapping):
            raise ConfigurationError(
                f"static locations must be a mapping of host -> location, not {type(mapping).__name__}"
            )
        table: dict[str, str] = {}
        for host, location in mapping.items():
            if not isinstance(host, str) or not host:
                raise ConfigurationError(f"static locations: bad host name {host!r}")
            try:
                table[host] = normalize_location(location)
            except InvalidArgumentError as exc:
                raise ConfigurationError(f"static locations: host {host!r}: {exc}") from None
        self._table = table

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> StaticLocationResolver:
        """Load a mapping file (JSON object or ``host location`` lines)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read locations file {str(p)!r}: {exc}") from None
        if text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"locations file {str(p)!r}: bad JSON: {exc}") from None
            if not isinstance(data, dict):
                raise ConfigurationError(f"locations file {str(p)!r}: expected a JSON object")
            return cls(data)
        table: dict[str, str] = {}
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            if len(fields) != 2:
                raise ConfigurationError(
                    f"locations file {str(p)!r} line {lineno}: expected 'host /region/rack', got {raw!r}"
                )
            table[fields[0]] = fields[1]
        return cls(table)

    @property
    def mapping(self) -> dict[str, str]:
        """A copy of the normalized table."""
        return dict(self._table)

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        return [self._table.get(name) for name in names]

    def reload(self) -> None:
        """Nothing is cached beyond the table itself."""


@final
class ScriptLocationResolver:
    """Runs a script with host names as arguments; it prints one location per line.

    The script is run with at most ``max_args`` names at a time and killed (with its process
    group) after ``timeout`` seconds. A script that fails, times out, or prints the wrong number
    of lines leaves that batch unresolved; a line that is not a valid location leaves that name
    unresolved. Each case is logged. Successful answers are cached until :meth:`reload`.

    The call blocks for as long as the script runs (at most ``timeout`` per batch); callers on an
    event loop should run it in a worker thread.
    """

    def __init__(
        self,
        script: str | os.PathLike[str],
        *,
        timeout: float = 5.0,
        max_args: int = 100,
    ) -> None:
        path = Path(script)
        if not path.is_file():
            raise ConfigurationError(
                f"location script {str(path)!r} does not exist or is not a file"
            )
        if not os.access(path, os.X_OK):
            raise ConfigurationError(f"location script {str(path)!r} is not executable")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigurationError(
                f"location script timeout must be > 0 seconds, got {timeout!r}"
            )
        if isinstance(max_args, bool) or not isinstance(max_args, int) or max_args < 1:
            raise ConfigurationError(
                f"location script max_args must be an int >= 1, got {max_args!r}"
            )
        self._script = str(path.absolute())
        self._timeout = float(timeout)
        self._max_args = max_args
        self._cache: dict[str, str] = {}

    @property
    def script(self) -> str:
        return self._script

    def resolve(self, names: Sequence[str]) -> list[str | None]:
        todo = [n for n in dict.fromkeys(names) if n not in self._cache]
        for start in range(0, len(todo), self._max_args):
            batch = todo[start : start + self._max_args]
            for name, loc in zip(batch, self._run(batch), strict=True):
                if loc is not None:
                    self._cache[name] = loc
        return [self._cache.get(n) for n in names]

    def reload(self) -> None:
        """Forget cached answers; the next resolve runs the script again."""
        self._cache.clear()

    def _run(self, names: list[str]) -> list[str | None]:
        failed: list[str | None] = [None] * len(names)
        try:
            proc = subprocess.Popen(
                [self._script, *names],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # so a timeout can kill the script's children too
            )
        except OSError as exc:
            log.warning("placement.location_script_failed", script=self._script, error=str(exc))
            return failed
        try:
            out, err = proc.communicate(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            log.warning(
                "placement.location_script_timeout",
                script=self._script,
                timeout=self._timeout,
                names=len(names),
            )
            return failed
        if proc.returncode != 0:
            log.warning(
                "placement.location_script_failed",
                script=self._script,
                returncode=proc.returncode,
                stderr=err.decode("utf-8", "replace")[:500],
            )
            return failed
        lines = [ln.strip() for ln in out.decode("utf-8", "replace").splitlines()]
        lines = [ln for ln in lines if ln]
        if len(lines) != len(names):
            log.warning(
                "placement.location_script_bad_output",
                script=self._script,
                expected_lines=len(names),
                got_lines=len(lines),
            )
            return failed
        result: list[str | None] = []
        for name, line in zip(names, lines, strict=True):
            try:
                result.append(normalize_location(line))
            except InvalidArgumentError as exc:
                log.warning(
                    "placement.location_script_bad_line",
                    script=self._script,
                    host=name,
                    error=str(exc),
                )
                result.append(None)
        return result


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def resolve_with(resolver: ResolverLike, names: list[str]) -> list[str | None]:
    """Call a resolver object or function, checking its answer; never raises.

    An answer that is not a list of the right length, or that raises, counts as "unknown" for
    every name (and is logged); a bad location string counts as unknown for that name.
    """
    if not names:
        return []
    fn = resolver.resolve if isinstance(resolver, LocationResolver) else resolver
    try:
        answer = list(fn(list(names)))
    except Exception as exc:  # a user's resolver must not take the client down
        log.warning("placement.resolver_failed", resolver=repr(resolver), error=repr(exc))
        return [None] * len(names)
    if len(answer) != len(names):
        log.warning(
            "placement.resolver_bad_answer",
            resolver=repr(resolver),
            expected=len(names),
            got=len(answer),
        )
        return [None] * len(names)
    out: list[str | None] = []
    for name, loc in zip(names, answer, strict=True):
        if loc is None:
            out.append(None)
            continue
        try:
            out.append(normalize_location(loc))
        except InvalidArgumentError as exc:
            log.warning("placement.resolver_bad_location", host=name, error=str(exc))
            out.append(None)
    return out


def reload_resolvers(resolvers: Iterable[object]) -> None:
    for r in resolvers:
        reload = getattr(r, "reload", None)
        if callable(reload):
            reload()
