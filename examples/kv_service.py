"""One replica of the replicated KV service: election, leading or following, and the HTTP API.

Three replicas started on one log form a service: the one that holds the lease
(``walkit.recipes.LeaderElection``) takes the log over (fencing the previous leader), catches
up and serves writes; the others follow the log and redirect writes to it. See docs/kv.md.
"""

from __future__ import annotations

import random
import time
import urllib.parse
from typing import Any, final

import attrs
import kv_health
import trio
from kv_http import Limits, Request, Response, Stats, error, json_response, serve
from kv_state import KVState, command, decode_value, encode_value
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

import walkit
from walkit.recipes import LeaderElection
from walkit.statemachine import Leader, Replica

MAX_KEY = 1024
_METHODS = frozenset({"GET", "PUT", "DELETE", "POST", "HEAD"})
KV_PREFIX = "/v1/kv/"


@final
@attrs.define
class Options:
    url: str
    log: str = "kv"
    host: str = "127.0.0.1"
    port: int = 0
    lease_timeout: float = 1.0
    snapshot_every: int = 10_000
    max_body: int = 64 * 1024
    max_batch: int = 512
    batches_in_flight: int = 4
    #: HTTP connections at once (None: half the open-file limit, at most 1,024), and the
    #: seconds a keep-alive connection may idle and a request may take to arrive.
    max_connections: int | None = None
    idle_timeout: float = 30.0
    request_timeout: float = 30.0
    #: Bytes of keys and values the store may hold: a PUT that would grow it past this is
    #: refused with 507 (deletes, and PUTs that do not grow it, still go). Every replica holds
    #: the whole map in memory and replays it from the log, so without a bound a stranger's
    #: PUTs could grow it until every replica runs out of memory, again at each restart.
    quota_bytes: int = 1 << 30


@final
@attrs.define
class _FollowFailure:
    """The follow loop's failures since it last applied a record (``kv_health``)."""

    since: float
    error: str
    applied: int


@final
class _Pending:
    """One write waiting for its batch."""

    __slots__ = ("cmd", "done", "duplicate", "error", "position", "result")

    def __init__(self, cmd: bytes) -> None:
        self.cmd = cmd
        self.duplicate = False
        self.done = trio.Event()
        self.result: Any = None
        self.position: str | None = None
        self.error: BaseException | None = None


@final
class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "kv_requests", "HTTP requests answered", ["method", "code"], registry=r
        )
        self.latency = Histogram(
            "kv_request_seconds", "HTTP request latency", ["method"], registry=r
        )
        self.batch = Histogram(
            "kv_commit_batch_size",
            "commands per append_batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=r,
        )
        self.leader = Gauge("kv_is_leader", "1 on the leader", registry=r)
        self.applied = Gauge("kv_applied_records", "records applied by this replica", registry=r)
        self.step_downs = Counter("kv_step_downs", "times this replica stopped leading", registry=r)
        self.quota_refused = Counter(
            "kv_quota_refused", "PUTs refused with 507: the store would pass its quota", registry=r
        )
        self.http = Stats()
        r.register(_HttpCollector(self.http))


@final
class _HttpCollector:
    """The HTTP server's connection counts (kept by kv_http, read at scrape time)."""

    def __init__(self, stats: Stats) -> None:
        self._stats = stats

    def collect(self) -> Any:
        s = self._stats
        yield GaugeMetricFamily("kv_http_connections", "HTTP connections open", value=s.open)
        for name, doc, value in (
            ("kv_http_connections_refused", "connections answered 503: too many open", s.refused),
            (
                "kv_http_idle_closed",
                "keep-alive connections closed after idle_timeout",
                s.idle_closed,
            ),
            (
                "kv_http_evicted",
                "connections closed to make room for a newcomer at max_connections",
                s.evicted,
            ),
            (
                "kv_http_timed_out",
                "connections closed: a request or its answer took over request_timeout",
                s.timed_out,
            ),
        ):
            yield CounterMetricFamily(name, doc, value=value)


@final
class _StateCollector:
    """The store's size against its quota, read at scrape time."""

    def __init__(self, state: KVState, quota: int) -> None:
        self._state = state
        self._quota = quota

    def collect(self) -> Any:
        yield GaugeMetricFamily(
            "kv_state_bytes", "bytes of keys and values this replica holds", value=self._state.size
        )
        yield GaugeMetricFamily("kv_quota_bytes", "the quota (--quota-bytes)", value=self._quota)


@final
class KVService:
    def __init__(self, client: walkit.Client, log: walkit.Log, options: Options) -> None:
        self.options = options
        self.client = client
        self.state = KVState()
        self.replica = Replica(log, self.state, snapshot_every=options.snapshot_every)
        self.metrics = _Metrics()
        self.metrics.registry.register(_StateCollector(self.state, options.quota_bytes))
        #: Growth of the PUTs admitted under the quota and not applied yet.
        self._reserved = 0
        self.election: LeaderElection | None = None
        self.address = ""
        self._leader: Leader | None = None  # set while leading and caught up
        self._pending: list[_Pending] = []
        self._has_pending = trio.Event()
        self._lead_failed = trio.Event()
        self._metric_children: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._follow_failure: _FollowFailure | None = None

    @property
    def leading(self) -> bool:
        """Leading, with the log taken over and caught up."""
        return self._leader is not None

    @property
    def follow_failure(self) -> _FollowFailure | None:
        return self._follow_failure

    # --- the replica's life ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        opts = self.options
        async with trio.open_nursery() as nursery:
            port = await nursery.start(self._serve_http)
            self.address = f"{opts.host}:{port}"
            self.election = LeaderElection(
                opts.url,
                f"/walkit-kv/{opts.log}/leader",
                self.address,
                lease_timeout=opts.lease_timeout,
                rng=random.Random(),
                store_options=_lease_store_options(opts),
            )
            await nursery.start(self.election.run)
            task_status.started(self.address)
            while True:
                generation = self.election.generation
                if self.election.is_leader:
                    await self._lead()
                else:
                    await self._follow_until(generation)

    async def _serve_http(self, task_status: trio.TaskStatus[int]) -> None:
        await serve(
            self.handle,
            self.options.host,
            self.options.port,
            max_body=self.options.max_body,
            limits=Limits(
                max_connections=self.options.max_connections,
                idle_timeout=self.options.idle_timeout,
                request_timeout=self.options.request_timeout,
            ),
            stats=self.metrics.http,
            task_status=task_status,
        )

    async def _follow_until(self, generation: int) -> None:
        election = self.election
        assert election is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow)
            while not election.is_leader:
                await election.wait_changed(generation)
                generation = election.generation
            nursery.cancel_scope.cancel()

    async def _follow(self) -> None:
        while True:
            try:
                await self.replica.follow()
            except walkit.errors.WalkitError as exc:
                print(f"kv: follow failed ({type(exc).__name__}: {exc}); retrying", flush=True)
                failure = self._follow_failure
                applied = self.replica.applied_count
                if failure is None or failure.applied != applied:  # it made progress since
                    failure = self._follow_failure = _FollowFailure(
                        trio.current_time(), "", applied
                    )
                failure.error = f"{type(exc).__name__}: {exc}"
                await trio.sleep(0.5)

    async def _lead(self) -> None:
        election = self.election
        assert election is not None
        self._lead_failed = trio.Event()
        led = False
        try:
            async with self.replica.lead() as leader:
                led = True
                self._leader = leader
                self.metrics.leader.set(1)
                print(f"kv: leading log {self.options.log!r} at {self.address}", flush=True)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._committer, leader)
                    generation = election.generation
                    while election.is_leader and not self._lead_failed.is_set():
                        with trio.move_on_after(0.2):
                            await election.wait_changed(generation)
                        generation = election.generation
                    nursery.cancel_scope.cancel()
        except walkit.errors.WalkitError as exc:
            print(f"kv: stopped leading ({type(exc).__name__}: {exc})", flush=True)
        finally:
            self._leader = None
            self.metrics.leader.set(0)
            if led:
                self.metrics.step_downs.inc()
            self._fail_pending(walkit.errors.WriterFencedError("this replica stopped leading"))
        if election.is_leader:
            # Fenced or failed while holding the lease: give it up so that another replica
            # (or this one, later) starts afresh.
            await election.resign()
            await trio.sleep(self.options.lease_timeout / 2)
        print("kv: following", flush=True)

    # --- group commit ---------------------------------------------------------------------------

    async def _committer(self, leader: Leader) -> None:
        limiter = trio.Semaphore(self.options.batches_in_flight)
        async with trio.open_nursery() as nursery:
            while True:
                await self._has_pending.wait()
                await limiter.acquire()
                batch = self._pending[: self.options.max_batch]
                del self._pending[: len(batch)]
                if not self._pending:
                    self._has_pending = trio.Event()
                if batch:
                    nursery.start_soon(self._commit, leader, batch, limiter)
                else:
                    limiter.release()

    async def _commit(self, leader: Leader, batch: list[_Pending], limiter: trio.Semaphore) -> None:
        try:
            self.metrics.batch.observe(len(batch))
            results = await leader.submit_batch([p.cmd for p in batch])
            for p, result in zip(batch, results, strict=True):
                p.result = result
                p.position = result[2]
        except BaseException as exc:
            for p in batch:
                p.error = exc
            self._lead_failed.set()
            if not isinstance(exc, walkit.errors.WalkitError):
                raise
        finally:
            for p in batch:
                p.done.set()
            limiter.release()
            self.metrics.applied.set(self.replica.applied_count)

    def _fail_pending(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, []
        for p in pending:
            p.error = exc
            p.done.set()

    async def _write(self, cmd: bytes, tag: tuple[str, int] | None = None) -> _Pending:
        p = _Pending(cmd)
        if tag is not None:
            # Idempotent: appended on its own, so that a duplicate fails only itself.
            leader = self._leader
            assert leader is not None
            try:
                p.result = await leader.submit(cmd, producer_id=tag[0], sequence=tag[1])
                p.position = p.result[2]
            except walkit.errors.DuplicateRecordError as exc:
                p.duplicate = True
                p.position = None if exc.position is None else str(exc.position)
            except walkit.errors.WalkitError as exc:
                p.error = exc
                self._lead_failed.set()
            return p
        self._pending.append(p)
        self._has_pending.set()
        await p.done.wait()
        return p

    # --- HTTP ------------------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        response = await self._route(request)
        method = request.method if request.method in _METHODS else "OTHER"  # bounded labels
        key = (method, response.status)
        children = self._metric_children.get(key)
        if children is None:
            children = (
                self.metrics.requests.labels(method, str(response.status)),
                self.metrics.latency.labels(method),
            )
            self._metric_children[key] = children
        children[0].inc()
        children[1].observe(time.perf_counter() - started)
        return response

    async def _route(self, request: Request) -> Response:
        path = request.path
        if path.startswith(KV_PREFIX):
            key = path[len(KV_PREFIX) :]
            if not key or "\x00" in key:
                return error(400, "missing or malformed key")
            if len(key.encode("utf-8", "surrogateescape")) > MAX_KEY:
                return error(400, f"key is longer than {MAX_KEY} bytes")
            if request.method in ("GET", "HEAD"):  # HEAD: the same answer, sent without body
                return await self._get(request, key)
            if request.method == "PUT":
                return await self._put(request, key)
            if request.method == "DELETE":
                return await self._delete(request, key)
            return error(405, f"method {request.method} not allowed on keys")
        if path == "/v1/status" and request.method in ("GET", "HEAD"):
            return json_response(200, self.status())
        if path in ("/livez", "/readyz") and request.method in ("GET", "HEAD"):
            if path == "/livez":
                code, doc = kv_health.liveness(self)
            else:
                code, doc = await kv_health.readiness(self)
            return json_response(code, doc)
        if path == "/metrics" and request.method in ("GET", "HEAD"):
            self.metrics.applied.set(self.replica.applied_count)
            return Response(
                200,
                generate_latest(self.metrics.registry),
                content_type="text/plain; version=0.0.4; charset=utf-8",
            )
        return error(404, f"no such endpoint: {request.method} {path}")

    def status(self) -> dict[str, Any]:
        election = self.election
        leading = self._leader is not None
        return {
            "role": "leader" if leading else "follower",
            "leader": election.leader if election is not None else None,
            "applied": str(self.replica.applied_position),
            "address": self.address,
            "size_bytes": self.state.size,
            "quota_bytes": self.options.quota_bytes,
        }

    def _not_leader(self, request: Request) -> Response:
        """Where to send a request only the leader can answer."""
        election = self.election
        target = election.leader if election is not None else None
        if target is None or target == self.address:
            # No leader, or this replica won but is still taking the log over.
            return error(503, "no leader at the moment", [("retry-after", "1")])
        query = urllib.parse.urlencode(request.query)  # re-encoded: the values came decoded
        location = f"http://{target}{_quote(request.path)}" + (f"?{query}" if query else "")
        return error(307, f"not the leader: try {target}", [("location", location)])

    async def _get(self, request: Request, key: str) -> Response:
        if self._leader is not None:
            election = self.election
            assert election is not None
            if not await election.confirm():
                return error(503, "this replica just lost the lead", [("retry-after", "1")])
            return self._value(key, [])
        if request.query.get("consistent", "false").lower() in ("true", "1", "yes"):
            return self._not_leader(request)
        return self._value(key, [("x-applied-position", str(self.replica.applied_position))])

    def _value(self, key: str, headers: list[tuple[str, str]]) -> Response:
        found = self.state.get(key)
        if found is None:
            return error(404, f"no such key: {key}", headers)
        value, position = found
        return Response(
            200,
            decode_value(value),
            [("x-position", position), *headers],
            content_type="application/octet-stream",
        )

    async def _put(self, request: Request, key: str) -> Response:
        expect = request.headers.get("if-match")
        if expect is not None:
            expect = expect.strip().strip('"')
            try:
                walkit.LogPosition.parse(expect)
            except (ValueError, walkit.errors.WalkitError):
                return error(400, f"If-Match must be a log position like 1:0, not {expect!r}")
        tag = _producer(request)
        if isinstance(tag, Response):
            return tag
        if self._leader is None:
            return self._not_leader(request)
        value = encode_value(request.body)
        # Admitted against what is applied plus what is admitted and not applied yet, so
        # concurrent PUTs cannot pass the quota together; followers apply whatever the log
        # holds, so a replica with another quota never diverges.
        growth = max(0, self.state.growth(key, value))
        quota = self.options.quota_bytes
        if growth and self.state.size + self._reserved + growth > quota:
            self.metrics.quota_refused.inc()
            return json_response(
                507,
                {
                    "error": f"quota exceeded: the store holds {self.state.size} of "
                    f"{quota} bytes; delete keys or raise --quota-bytes",
                    "size_bytes": self.state.size,
                    "quota_bytes": quota,
                },
            )
        self._reserved += growth
        try:
            p = await self._write(command("set", key, value, expect), tag)
        finally:
            self._reserved -= growth
        if p.duplicate:
            return _duplicate(p)
        if p.error is not None:
            return self._write_failed(p.error)
        outcome, detail, _position = p.result
        if outcome == "mismatch":
            return json_response(
                412, {"error": "If-Match does not match the key's last write", "position": detail}
            )
        assert p.position is not None  # set with the result
        # The position is a plain ASCII str ("2:17"): no need for the JSON encoder.
        return Response(200, b'{"position": "%s"}\n' % p.position.encode())

    async def _delete(self, request: Request, key: str) -> Response:
        tag = _producer(request)
        if isinstance(tag, Response):
            return tag
        if self._leader is None:
            return self._not_leader(request)
        p = await self._write(command("delete", key), tag)
        if p.duplicate:
            return _duplicate(p)
        if p.error is not None:
            return self._write_failed(p.error)
        outcome, _detail, _position = p.result
        if outcome == "absent":
            return json_response(404, {"error": f"no such key: {key}", "position": p.position})
        return json_response(200, {"position": p.position})

    @staticmethod
    def _write_failed(exc: BaseException) -> Response:
        # The command may or may not be in the log: the client must not assume either.
        return error(
            503,
            f"write outcome unknown, leader stepped down ({type(exc).__name__})",
            [("retry-after", "1")],
        )


def _producer(request: Request) -> tuple[str, int] | Response | None:
    """The ``Walkit-Producer``/``Walkit-Sequence`` headers of an idempotent write (a client
    that retries a write with the same pair has it applied once)."""
    producer = request.headers.get("walkit-producer")
    sequence = request.headers.get("walkit-sequence")
    if producer is None and sequence is None:
        return None
    if not producer or sequence is None or not sequence.isascii() or not sequence.isdigit():
        return error(400, "give Walkit-Producer (an id) and Walkit-Sequence (an integer) together")
    if len(producer.encode()) > 255 or int(sequence) >= 2**64:
        return error(400, "Walkit-Producer is at most 255 bytes, Walkit-Sequence below 2^64")
    return producer, int(sequence)


def _duplicate(p: _Pending) -> Response:
    """A retried write that the log already holds: it was applied once, at ``position``."""
    return json_response(200, {"position": p.position, "duplicate": True})


def _lease_store_options(opts: Options) -> dict[str, Any]:
    """On sqlite, watches poll: poll the lease's session often enough for a short lease (a
    dead leader's node is noticed within a tenth of the lease, at most 50 ms)."""
    if opts.url.startswith("sqlite:"):
        return {"poll_interval": min(0.05, opts.lease_timeout / 10)}
    return {}


def _quote(path: str) -> str:
    import urllib.parse

    return urllib.parse.quote(path, safe="/", errors="surrogateescape")
