"""One replica of the replicated KV service: election, leading or following, and the HTTP API.

Three replicas started on one log form a service: the one that holds the lease
(``walkit.recipes.LeaderElection``) takes the log over (fencing the previous leader), catches
up and serves writes; the others follow the log and redirect writes to it. See docs/kv.md.

It runs on asyncio (uvloop when installed; walkit's async API runs on the loop that awaits
it), and the hot paths cost per batch rather than per request: a PUT waits in a future that
its group commit completes, and the leader's linearizable reads wait in futures that one lease
check completes; neither starts a task per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, final

import anyio
import anyio.abc
import attrs
import kv_health
from kv_http import Limits, Request, Response, error, json_response, serve
from kv_metrics import Metrics
from kv_state import KVState, command, decode_value, encode_value
from prometheus_client import generate_latest

import walkit
from walkit.recipes import LeaderElection
from walkit.statemachine import Leader, Replica

MAX_KEY = 1024
KV_PREFIX = "/v1/kv/"
#: Seconds a rendered /metrics answer is served again while nothing it counts changed.
METRICS_TTL = 1.0


@final
@attrs.define
class Options:
    url: str
    log: str = "kv"
    host: str = "127.0.0.1"
    port: int = 0
    lease_timeout: float = 1.0
    snapshot_every: int = 10_000
    snapshot_ratio: float = 1.0
    max_body: int = 64 * 1024
    #: Commands per group commit, at most.
    max_batch: int = 512
    #: Group commits in flight at once (pipelined: each is its own log entry); one starts
    #: beside others only once it has ``group_commit_min`` commands, else it waits for them
    #: and takes the commands that arrive meanwhile.
    group_commits: int = 3
    group_commit_min: int = 16
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
    #: The HTTP server: kv_http, or uvicorn (``uvicorn-httptools``, ``uvicorn-h11``) through
    #: kv_asgi, for comparison (docs/kv.md, "Why this server").
    http_server: str = "kv_http"


#: What a write's answer is, given what the state machine's apply returned.
Finish = Callable[[Any], Response]
#: Connects a client and opens the service's log on it (again after a session expiry).
Connect = Callable[[], contextlib.AbstractAsyncContextManager[walkit.Log]]


@final
@attrs.define
class _FollowFailure:
    """The follow loop's failures since it last applied a record (``kv_health``)."""

    since: float
    error: str
    applied: int


@final
class _Pending:
    """One write waiting for its group commit; ``future`` gets its answer."""

    __slots__ = ("cmd", "finish", "future", "growth")

    def __init__(
        self, cmd: bytes, finish: Finish, future: asyncio.Future[Response], growth: int
    ) -> None:
        self.cmd = cmd
        self.finish = finish
        self.future = future
        #: Quota bytes reserved for it until it is applied (or fails).
        self.growth = growth


def _write_failed(exc: BaseException) -> Response:
    # The command may or may not be in the log: the client must not assume either.
    return error(
        503,
        f"write outcome unknown, leader stepped down ({type(exc).__name__})",
        [("retry-after", "1")],
    )


_LOST_LEAD = error(503, "this replica just lost the lead", [("retry-after", "1")])


@final
class KVService:
    def __init__(self, connect: Connect, options: Options) -> None:
        self.options = options
        self._connect = connect
        self.state = KVState()
        self._replica: Replica | None = None
        self.metrics = Metrics(self.state, options.quota_bytes)
        self._scraped: tuple[tuple[int, bool, int, int, int], float, Response] | None = None
        #: Growth of the PUTs admitted under the quota and not applied yet.
        self._reserved = 0
        self.election: LeaderElection | None = None
        self.address = ""
        self._leader: Leader | None = None  # set while leading and caught up
        self._pending: list[_Pending] = []
        self._kick = anyio.Event()
        self._in_flight = 0
        #: Batches handed to the log and not answered yet, by number (answered 503 if the
        #: lead ends before their task could).
        self._committing: dict[int, list[_Pending]] = {}
        self._batches = 0
        #: Linearizable reads waiting for the next lease check: (key, future of the answer).
        self._reads: list[tuple[str, asyncio.Future[Response]]] = []
        self._confirming: list[tuple[str, asyncio.Future[Response]]] = []
        self._has_reads = anyio.Event()
        self._lead_failed = anyio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._follow_failure: _FollowFailure | None = None

    @property
    def connected(self) -> bool:
        """The log is open (``replica`` is there)."""
        return self._replica is not None

    @property
    def leading(self) -> bool:
        """Leading, with the log taken over and caught up."""
        return self._leader is not None

    @property
    def follow_failure(self) -> _FollowFailure | None:
        return self._follow_failure

    # --- the replica's life ---------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        opts = self.options
        self._loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as tasks:
            port = await tasks.start(self._serve_http)
            self.address = f"{opts.host}:{port}"
            self.election = LeaderElection(
                opts.url,
                f"/walkit-kv/{opts.log}/leader",
                self.address,
                lease_timeout=opts.lease_timeout,
                rng=random.Random(),
                store_options=_lease_store_options(opts),
            )
            await tasks.start(self.election.run)
            task_status.started(self.address)
            while True:
                try:
                    async with self._connect() as log:
                        if self._replica is None:
                            self._replica = Replica(
                                log,
                                self.state,
                                snapshot_every=opts.snapshot_every,
                                snapshot_ratio=opts.snapshot_ratio,
                            )
                        else:  # what was applied stays: the new handle reads on from there
                            self._replica.log = log
                        await self._serve_log(self.election)
                except BaseException as exc:
                    if not _session_expired(exc):
                        raise
                    # The client's metadata session expired (a long stall, an overloaded
                    # machine): nothing the client holds works any more; connect again.
                    while isinstance(exc, BaseExceptionGroup):
                        exc = exc.exceptions[0]
                    print(f"kv: metadata session expired ({exc}); connecting again", flush=True)
                    await anyio.sleep(0.1)

    @property
    def replica(self) -> Replica:
        assert self._replica is not None, "the service is not connected yet"
        return self._replica

    async def _serve_log(self, election: LeaderElection) -> None:
        """Lead or follow, as the election says, until the client's session expires."""
        while True:
            generation = election.generation
            if election.is_leader:
                await self._lead()
            else:
                await self._follow_until(generation)

    async def _serve_http(self, *, task_status: anyio.abc.TaskStatus[int]) -> None:
        limits = Limits(
            max_connections=self.options.max_connections,
            idle_timeout=self.options.idle_timeout,
            request_timeout=self.options.request_timeout,
        )
        if self.options.http_server != "kv_http":
            from kv_asgi import serve_uvicorn

            await serve_uvicorn(
                self.handle,
                self.options.host,
                self.options.port,
                parser=self.options.http_server.removeprefix("uvicorn-"),
                max_body=self.options.max_body,
                limits=limits,
                stats=self.metrics.http,
                observe=self._observe,
                task_status=task_status,
            )
            return
        await serve(
            self.handle,
            self.options.host,
            self.options.port,
            max_body=self.options.max_body,
            limits=limits,
            stats=self.metrics.http,
            observe=self._observe,
            task_status=task_status,
        )

    def _observe(self, request: Request, response: Response, now: float) -> None:
        self.metrics.requests.observe(request.method, response.status, now - request.received)

    async def _follow_until(self, generation: int) -> None:
        election = self.election
        assert election is not None
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._follow)
            while not election.is_leader:
                await election.wait_changed(generation)
                generation = election.generation
            tasks.cancel_scope.cancel()

    async def _follow(self) -> None:
        while True:
            try:
                await self.replica.follow()
            except walkit.errors.SessionExpiredError:
                raise
            except walkit.errors.WalkitError as exc:
                print(f"kv: follow failed ({type(exc).__name__}: {exc}); retrying", flush=True)
                failure = self._follow_failure
                applied = self.replica.applied_count
                if failure is None or failure.applied != applied:  # it made progress since
                    failure = self._follow_failure = _FollowFailure(
                        anyio.current_time(), "", applied
                    )
                failure.error = f"{type(exc).__name__}: {exc}"
                await anyio.sleep(0.5)

    async def _lead(self) -> None:
        election = self.election
        assert election is not None
        self._lead_failed = anyio.Event()
        self._in_flight = 0
        led = False
        expired: BaseException | None = None
        try:
            async with self.replica.lead() as leader:
                led = True
                self._leader = leader
                self.metrics.leader.set(1)
                print(f"kv: leading log {self.options.log!r} at {self.address}", flush=True)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._committer, leader)
                    tasks.start_soon(self._confirmer, election)
                    generation = election.generation
                    while election.is_leader and not self._lead_failed.is_set():
                        with anyio.move_on_after(0.2):
                            await election.wait_changed(generation)
                        generation = election.generation
                    tasks.cancel_scope.cancel()
        except walkit.errors.WalkitError as exc:
            print(f"kv: stopped leading ({type(exc).__name__}: {exc})", flush=True)
            expired = exc
        finally:
            self._leader = None
            self.metrics.leader.set(0)
            if led:
                self.metrics.step_downs.inc()
            self._fail_pending(walkit.errors.WriterFencedError("this replica stopped leading"))
            self._fail_reads()
        if election.is_leader:
            # Fenced or failed while holding the lease: give it up so that another replica
            # (or this one, later) starts afresh.
            await election.resign()
            await anyio.sleep(self.options.lease_timeout / 2)
        if expired is not None and _session_expired(expired):
            raise expired
        print("kv: following", flush=True)

    # --- group commit ---------------------------------------------------------------------------

    async def _committer(self, leader: Leader) -> None:
        opts = self.options
        async with anyio.create_task_group() as tasks:
            while True:
                await self._kick.wait()
                self._kick = anyio.Event()
                while self._pending and (
                    self._in_flight == 0
                    or (
                        self._in_flight < opts.group_commits
                        and len(self._pending) >= opts.group_commit_min
                    )
                ):
                    batch = self._pending[: opts.max_batch]
                    del self._pending[: len(batch)]
                    self._in_flight += 1
                    self._batches += 1
                    self._committing[self._batches] = batch
                    tasks.start_soon(self._commit, leader, self._batches)

    async def _commit(self, leader: Leader, number: int) -> None:
        batch = self._committing.pop(number)
        answers: list[Response] | None = None
        try:
            self.metrics.batch.observe(len(batch))
            results = await leader.submit_batch([p.cmd for p in batch], flush=True)
            answers = [p.finish(result) for p, result in zip(batch, results, strict=True)]
        except BaseException as exc:
            failed = _write_failed(exc)
            answers = [failed] * len(batch)
            self._lead_failed.set()
            if not isinstance(exc, walkit.errors.WalkitError):
                raise
        finally:
            for p, answer in zip(batch, answers or [], strict=False):
                self._reserved -= p.growth
                if not p.future.done():
                    p.future.set_result(answer)
            self._in_flight -= 1
            self._kick.set()
            self.metrics.applied.set(self.replica.applied_count)

    def _fail_pending(self, exc: BaseException) -> None:
        pending, self._pending = self._pending, []
        for batch in self._committing.values():
            pending.extend(batch)
        self._committing.clear()
        failed = _write_failed(exc)
        for p in pending:
            self._reserved -= p.growth
            if not p.future.done():
                p.future.set_result(failed)

    def _write(
        self, cmd: bytes, finish: Finish, tag: tuple[str, int] | None, growth: int = 0
    ) -> Awaitable[Response]:
        """Queue ``cmd`` for the next group commit; its answer is ``finish`` of what applying
        it returned. An idempotent write (``tag``) is appended on its own, so that a duplicate
        fails only itself."""
        if tag is not None:
            return self._write_tagged(cmd, finish, tag, growth)
        assert self._loop is not None
        future: asyncio.Future[Response] = self._loop.create_future()
        self._reserved += growth
        pending = self._pending
        pending.append(_Pending(cmd, finish, future, growth))
        if self._in_flight == 0 or len(pending) >= self.options.group_commit_min:
            self._kick.set()
        return future

    async def _write_tagged(
        self, cmd: bytes, finish: Finish, tag: tuple[str, int], growth: int
    ) -> Response:
        leader = self._leader
        assert leader is not None
        self._reserved += growth
        try:
            result = await leader.submit(cmd, producer_id=tag[0], sequence=tag[1])
        except walkit.errors.DuplicateRecordError as exc:
            # A retried write that the log already holds: applied once, at that position.
            position = None if exc.position is None else str(exc.position)
            return json_response(200, {"position": position, "duplicate": True})
        except walkit.errors.WalkitError as exc:
            self._lead_failed.set()
            return _write_failed(exc)
        finally:
            self._reserved -= growth
        return finish(result)

    # --- linearizable reads ---------------------------------------------------------------------

    async def _confirmer(self, election: LeaderElection) -> None:
        """Answer the leader's reads: one lease check for all the reads that arrived before
        it started (a read that arrives during a check waits for the next one)."""
        while True:
            await self._has_reads.wait()
            self._confirming, self._reads = self._reads, []
            self._has_reads = anyio.Event()
            confirmed = await election.confirm()
            reads, self._confirming = self._confirming, []
            for key, future in reads:
                if not future.done():
                    future.set_result(self._value(key, []) if confirmed else _LOST_LEAD)

    def _fail_reads(self) -> None:
        reads = self._reads + self._confirming
        self._reads, self._confirming = [], []
        for _key, future in reads:
            if not future.done():
                future.set_result(_LOST_LEAD)

    # --- HTTP ------------------------------------------------------------------------------------

    def handle(self, request: Request) -> Response | Awaitable[Response]:
        path = request.path
        if path.startswith(KV_PREFIX):
            key = path[len(KV_PREFIX) :]
            if not key or "\x00" in key:
                return error(400, "missing or malformed key")
            if len(key) > MAX_KEY // 4 and len(key.encode("utf-8", "surrogateescape")) > MAX_KEY:
                return error(400, f"key is longer than {MAX_KEY} bytes")
            method = request.method
            if method == "GET" or method == "HEAD":  # HEAD: the same answer, without body
                return self._get(request, key)
            if method == "PUT":
                return self._put(request, key)
            if method == "DELETE":
                return self._delete(request, key)
            return error(405, f"method {method} not allowed on keys")
        if path == "/v1/status" and request.method in ("GET", "HEAD"):
            return json_response(200, self.status())
        if path == "/livez" and request.method in ("GET", "HEAD"):
            return json_response(*kv_health.liveness(self))
        if path == "/readyz" and request.method in ("GET", "HEAD"):
            return self._readiness()
        if path == "/metrics" and request.method in ("GET", "HEAD"):
            return self._scrape()
        return error(404, f"no such endpoint: {request.method} {path}")

    async def _readiness(self) -> Response:
        # A coroutine only here: the probe awaits a lease check or a read of the log.
        return json_response(*await kv_health.readiness(self))

    def _scrape(self) -> Response:
        """The metrics, rendered at most once per ``METRICS_TTL`` while nothing was applied
        and the role and connection counts stayed: a render costs milliseconds, and a peer
        pipelining ``/metrics`` would otherwise cost the loop (and the lead) one per request."""
        applied = self._replica.applied_count if self._replica else 0
        http = self.metrics.http
        key = (
            applied,
            self._leader is not None,
            http.open_connections(),
            http.refused,
            http.timed_out,
        )
        now = time.monotonic()
        cached = self._scraped
        if cached is not None and cached[0] == key and now - cached[1] < METRICS_TTL:
            return cached[2]
        self.metrics.applied.set(applied)
        response = Response(
            200,
            generate_latest(self.metrics.registry),
            content_type="text/plain; version=0.0.4; charset=utf-8",
        )
        self._scraped = (key, now, response)
        return response

    def status(self) -> dict[str, Any]:
        election = self.election
        leading = self._leader is not None
        return {
            "role": "leader" if leading else "follower",
            "leader": election.leader if election is not None else None,
            "applied": self._applied(),
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

    def _get(self, request: Request, key: str) -> Response | Awaitable[Response]:
        if self._leader is not None:
            # Linearizable: answered after a lease check that started after it arrived.
            assert self._loop is not None
            future: asyncio.Future[Response] = self._loop.create_future()
            self._reads.append((key, future))
            self._has_reads.set()
            return future
        if request.query and request.query.get("consistent", "false").lower() in (
            "true",
            "1",
            "yes",
        ):
            return self._not_leader(request)
        return self._value(key, [("x-applied-position", self._applied())])

    def _applied(self) -> str:
        """The position of the last command applied here (before the first connect: none)."""
        replica = self._replica
        return str(replica.applied_position if replica else walkit.LogPosition.EARLIEST)

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

    def _put(self, request: Request, key: str) -> Response | Awaitable[Response]:
        headers = request.headers
        expect = headers.get("if-match")
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
        return self._write(command("set", key, value, expect), _put_answer, tag, growth)

    def _delete(self, request: Request, key: str) -> Response | Awaitable[Response]:
        tag = _producer(request)
        if isinstance(tag, Response):
            return tag
        if self._leader is None:
            return self._not_leader(request)

        def answer(result: Any) -> Response:
            outcome, _detail, position = result
            if outcome == "absent":
                return json_response(404, {"error": f"no such key: {key}", "position": position})
            return json_response(200, {"position": position})

        return self._write(command("delete", key), answer, tag)


def _put_answer(result: Any) -> Response:
    outcome, detail, position = result
    if outcome == "mismatch":
        return json_response(
            412, {"error": "If-Match does not match the key's last write", "position": detail}
        )
    # The position is a plain ASCII str ("2:17"): no need for the JSON encoder.
    return Response(200, b'{"position": "%s"}\n' % position.encode())


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


def _session_expired(exc: BaseException) -> bool:
    """Whether ``exc`` is (or a group holding only) a metadata session's expiry."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_session_expired(e) for e in exc.exceptions)
    return isinstance(exc, walkit.errors.SessionExpiredError)


def _lease_store_options(opts: Options) -> dict[str, Any]:
    """On sqlite, watches poll: poll the lease's session often enough for a short lease (a
    dead leader's node is noticed within a tenth of the lease, at most 50 ms)."""
    if opts.url.startswith("sqlite:"):
        return {"poll_interval": min(0.05, opts.lease_timeout / 10)}
    return {}


def _quote(path: str) -> str:
    return urllib.parse.quote(path, safe="/", errors="surrogateescape")
