"""A replicated key-value store on a walkit log (``walkit.statemachine``).

The service (docs/kv.md): start three replicas on one log; one leads (it holds a lease in the
metadata store and owns the log), the others follow and take over when it dies::

    python examples/kv_store.py serve --metadata URL --http 127.0.0.1:8001 [--log NAME]

Each replica answers ``GET /livez`` and ``GET /readyz`` for orchestrators (``kv_health``).

The rest is the original command-line toy, kept for the demo:

Every change is a JSON command appended to the log before it is applied; a snapshot of the
whole map is saved every N changes (and the log truncated behind it); a replica starts from
the latest snapshot and replays the log after it; a standby follows the log and takes over
when the primary goes away, fencing it.

    python examples/kv_store.py URL                  # a short demo: failover included
    python examples/kv_store.py URL set KEY VALUE
    python examples/kv_store.py URL get KEY          # exit status 1 if KEY is not set
    python examples/kv_store.py URL delete KEY
    python examples/kv_store.py URL dump             # the whole map, as JSON

URL is a metadata URL of a running cluster (``walkit sandbox`` prints one), or set
WALKIT_METADATA. ``--log NAME`` picks the log (default ``kv``; the demo uses ``kv-demo``).
Each ``set``/``delete`` run takes the log over as primary, so run one at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from typing import final

import anyio
import trio
from kv_state import KVState
from kv_state import command as kv_command

import walkit
from walkit.statemachine import Leader, Replica


@final
class Primary:
    """Writes go through the log (durable before they are applied); reads are local."""

    def __init__(self, store: KVStore, leader: Leader) -> None:
        self._store = store
        self._leader = leader

    async def set(self, key: str, value: str) -> str | None:
        """Set ``key``; returns the previous value."""
        _outcome, previous, _pos = await self._leader.submit(kv_command("set", key, value))
        return None if previous is None else str(previous)

    async def delete(self, key: str) -> str | None:
        _outcome, previous, _pos = await self._leader.submit(kv_command("delete", key))
        return None if previous is None else str(previous)

    def get(self, key: str) -> str | None:
        return self._store.get(key)

    @property
    def position(self) -> walkit.LogPosition:
        """The position of the last change applied here (for read-your-writes elsewhere)."""
        return self._store.replica.applied_position


@final
class KVStore:
    """One replica of the store."""

    def __init__(self, log: walkit.Log, *, snapshot_every: int = 100) -> None:
        self.state = KVState()
        self.replica = Replica(log, self.state, snapshot_every=snapshot_every)

    def get(self, key: str) -> str | None:
        found = self.state.get(key)
        return None if found is None else found[0]

    def dump(self) -> dict[str, str]:
        return {k: v for k, (v, _pos) in self.state.data.items()}

    async def recover(self) -> None:
        """Latest snapshot, then the log after it."""
        await self.replica.recover()

    async def follow(self) -> None:
        """Stay up to date as a standby (until cancelled)."""
        await self.replica.follow()

    @contextlib.asynccontextmanager
    async def primary(self) -> AsyncIterator[Primary]:
        """Take the log over (the previous primary is fenced), catch up, then serve writes."""
        async with self.replica.lead() as leader:
            yield Primary(self, leader)


# --- the demo ------------------------------------------------------------------------------


async def demo(url: str, name: str) -> None:
    async with (
        walkit.Client.connect(url) as node_a,
        walkit.Client.connect(url) as node_b,
        walkit.Client.connect(url) as node_c,
    ):
        store_a = KVStore(await walkit.Log.open(node_a, name, roll_entries=50), snapshot_every=20)
        store_b = KVStore(await walkit.Log.open(node_b, name, roll_entries=50), snapshot_every=20)
        async with store_a.primary() as primary_a:
            print(f"node A is primary (log {name!r}, {len(store_a.dump())} keys restored)")
            for i in range(60):
                await primary_a.set(f"user:{i}", f"name-{i}")
            for i in range(0, 60, 10):
                await primary_a.delete(f"user:{i}")
            print(f"node A: wrote 66 changes, {len(store_a.dump())} keys, at {primary_a.position}")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(store_b.follow)
                with trio.fail_after(30):
                    await store_b.replica.wait_applied(primary_a.position)
                print(f"node B follows as a standby: {len(store_b.dump())} keys, same as A")
                nursery.cancel_scope.cancel()

            print("node A stops answering; node B takes over")
            async with store_b.primary() as primary_b:
                await primary_b.set("failover", "done by B")
                print(f"node B is primary: failover={primary_b.get('failover')!r}")
                try:
                    await primary_a.set("late", "from A")
                    print("node A could still write: that should not happen")
                except walkit.errors.WriterFencedError:
                    print("node A tried to write and was fenced (WriterFencedError)")
        snapshots = await store_b.replica.log.snapshots()
        md = await store_b.replica.log.metadata()
        print(
            f"log: {len(md.ledgers)} ledger(s), truncated at {md.truncated}, "
            f"{len(snapshots)} snapshot(s), latest at {snapshots[-1].position if snapshots else '-'}"
        )
        store_c = KVStore(await walkit.Log.open(node_c, name))
        await store_c.recover()
        same = store_c.dump() == store_b.dump()
        print(
            f"node C recovered from the latest snapshot and the log: {len(store_c.dump())} keys, "
            f"{'identical to' if same else 'DIFFERENT FROM'} node B"
        )
        if not same:
            raise SystemExit(1)
        print("the demo worked.")


# --- commands ------------------------------------------------------------------------------


async def command(url: str, name: str, args: argparse.Namespace) -> int:
    async with walkit.Client.connect(url) as client:
        store = KVStore(await walkit.Log.open(client, name), snapshot_every=args.snapshot_every)
        if args.action in ("get", "dump"):
            await store.recover()
            if args.action == "dump":
                print(json.dumps(store.dump(), indent=2, sort_keys=True))
                return 0
            value = store.get(args.key)
            if value is None:
                print(f"{args.key}: not set", file=sys.stderr)
                return 1
            print(value)
            return 0
        async with store.primary() as primary:
            if args.action == "set":
                previous = await primary.set(args.key, args.value)
            else:
                previous = await primary.delete(args.key)
            print(f"{args.action} {args.key} at {primary.position} (was {previous!r})")
        return 0


# --- the service ---------------------------------------------------------------------------


def _http_address(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not {text!r}")
    return host, int(port)


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not 0 < value < math.inf:  # (nan and inf are floats too)
            raise argparse.ArgumentTypeError(f"must be > 0 (and finite), not {text}")
        return value

    return parse


def serve_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="kv_store.py serve",
        description="one replica of the replicated KV service (start three on one log)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--metadata",
        default=os.environ.get("WALKIT_METADATA"),
        help="metadata URL of the cluster (default: $WALKIT_METADATA)",
    )
    parser.add_argument(
        "--http", type=_http_address, default=("127.0.0.1", 0), help="HOST:PORT to serve on"
    )
    parser.add_argument("--log", default="kv", help="the log (one service per log)")
    parser.add_argument(
        "--lease-timeout",
        type=_positive(float),
        default=1.0,
        help="seconds before a dead leader's lease expires (failover time vs false alarms)",
    )
    parser.add_argument(
        "--snapshot-every", type=_positive(int), default=10_000, help="commands per snapshot"
    )
    parser.add_argument(
        "--snapshot-ratio",
        type=_positive(float),
        default=1.0,
        help="and a snapshot waits until the log since the last one is this many times its size",
    )
    parser.add_argument(
        "--max-body", type=_positive(int), default=64 * 1024, help="largest value, in bytes"
    )
    parser.add_argument("--ensemble", type=_positive(int), default=3, help="E of the log's ledgers")
    parser.add_argument("--write-quorum", type=_positive(int), default=3, help="Qw")
    parser.add_argument("--ack-quorum", type=_positive(int), default=2, help="Qa")
    parser.add_argument(
        "--group-commits",
        type=_positive(int),
        default=3,
        help="group commits in flight at once (each its own log entry, pipelined)",
    )
    parser.add_argument(
        "--group-commit-min",
        type=_positive(int),
        default=16,
        help="commands a group commit needs to start while another is in flight",
    )
    parser.add_argument(
        "--batch-bytes",
        type=_positive(int),
        default=64 * 1024,
        help="largest log entry the leader writes: a full one goes at once, while others are "
        "in flight",
    )
    parser.add_argument(
        "--max-connections",
        type=_positive(int),
        default=None,
        help="HTTP connections at once; one more gets 503 (default: half the open-file limit, "
        "at most 1024)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_positive(float),
        default=30.0,
        help="seconds a keep-alive connection may wait for its next request",
    )
    parser.add_argument(
        "--request-timeout",
        type=_positive(float),
        default=30.0,
        help="seconds a request may take to arrive whole (and its answer to be taken)",
    )
    parser.add_argument(
        "--quota-bytes",
        type=_positive(int),
        default=1 << 30,
        help="bytes of keys and values the store may hold; a PUT that would grow it past "
        "this gets 507 (deletes still go)",
    )
    parser.add_argument(
        "--http-server",
        choices=["kv_http", "uvicorn-httptools", "uvicorn-h11"],
        default="kv_http",
        help="the HTTP server; the uvicorn ones are for comparison and lack bounds kv_http "
        "keeps (docs/kv.md, 'Why this server')",
    )
    parser.add_argument(
        "--log-level", default="warning", choices=["debug", "info", "warning", "error"]
    )
    args = parser.parse_args(argv)
    if not args.metadata:
        parser.error("give --metadata URL (or set WALKIT_METADATA)")
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr)
    try:
        from kv_service import KVService, Options
    except ImportError as exc:  # httptools: the service's HTTP parser
        parser.error(f"{exc}; the service needs the kv extra: pip install 'walkit[kv]'")

    host, port = args.http
    options = Options(
        url=args.metadata,
        log=args.log,
        host=host,
        port=port,
        lease_timeout=args.lease_timeout,
        snapshot_every=int(args.snapshot_every),
        snapshot_ratio=float(args.snapshot_ratio),
        max_body=int(args.max_body),
        max_connections=None if args.max_connections is None else int(args.max_connections),
        idle_timeout=float(args.idle_timeout),
        request_timeout=float(args.request_timeout),
        quota_bytes=int(args.quota_bytes),
        group_commits=int(args.group_commits),
        group_commit_min=int(args.group_commit_min),
        http_server=str(args.http_server),
    )

    @contextlib.asynccontextmanager
    async def connect() -> AsyncIterator[walkit.Log]:
        async with walkit.Client.connect(args.metadata) as client:
            yield await walkit.Log.open(
                client,
                args.log,
                ensemble_size=int(args.ensemble),
                write_quorum=int(args.write_quorum),
                ack_quorum=int(args.ack_quorum),
                batch_bytes=int(args.batch_bytes),
            )

    async def run() -> None:
        service = KVService(connect, options)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tasks:
                address = await tasks.start(service.run)
                print(f"kv: serving http://{address} (log {args.log!r})", flush=True)
                async for _signum in signals:
                    # A clean stop: the lease is given up on the way out, so another
                    # replica takes over at once instead of after the lease timeout.
                    print("kv: stopping", flush=True)
                    tasks.cancel_scope.cancel()
                    break

    try:
        # asyncio, on uvloop when it is installed: the HTTP server is asyncio protocols.
        anyio.run(run, backend="asyncio", backend_options={"use_uvloop": _has_uvloop()})
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except (walkit.errors.WalkitError, OSError, BaseExceptionGroup) as exc:
        cause = _first_leaf(exc)
        if not isinstance(cause, walkit.errors.WalkitError | OSError):
            raise
        print(f"kv_store: error: {type(cause).__name__}: {cause}", file=sys.stderr)
        raise SystemExit(1) from None


def _has_uvloop() -> bool:
    import importlib.util

    return importlib.util.find_spec("uvloop") is not None


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve":
        serve_main(argv[1:])
        return
    # The URL comes first (or from WALKIT_METADATA); argparse cannot mix an optional
    # positional with subcommands.
    url = argv.pop(0) if argv and "://" in argv[0] else os.environ.get("WALKIT_METADATA")
    parser = argparse.ArgumentParser(
        prog="kv_store.py",
        usage="%(prog)s URL [--log NAME] [--snapshot-every N] [set K V | get K | delete K | dump]",
        description="a replicated key-value store on walkit",
    )
    parser.add_argument("--log", default=None, help="log name (default kv; the demo: kv-demo)")
    parser.add_argument("--snapshot-every", type=int, default=100)
    sub = parser.add_subparsers(dest="action")
    set_ = sub.add_parser("set")
    set_.add_argument("key")
    set_.add_argument("value")
    sub.add_parser("get").add_argument("key")
    sub.add_parser("delete").add_argument("key")
    sub.add_parser("dump")
    args = parser.parse_args(argv)
    if not url:
        parser.error("give a metadata URL first (or set WALKIT_METADATA)")
    # The demo and commands show errors only: walkit logs through the standard logging module.
    logging.getLogger("walkit").setLevel(logging.ERROR)
    try:
        if args.action is None:
            trio.run(demo, url, args.log or "kv-demo")
            code = 0
        else:
            code = trio.run(command, url, args.log or "kv", args)
    except walkit.errors.WalkitError as exc:
        print(f"kv_store: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    raise SystemExit(code)


if __name__ == "__main__":
    main()
