"""Orders on a walkit log, served by FastAPI under uvicorn: walkit's async API on asyncio.

::

    python examples/fastapi_orders.py --metadata URL --http 127.0.0.1:8101 [--log orders]

Run two (or more) on one log. They elect a leader through the metadata store (a lease,
``walkit.recipes.LeaderElection``); the leader owns the log's writer. ``POST /orders`` (a
JSON object) appends the order to the log and answers ``201 {"id", "position"}`` once the
record is durable and applied here; a follower answers ``307`` to the leader. A lifespan task
tails the log into the app's state on every instance, and ``GET /orders/{id}`` reads it.
``GET /status`` says ``{"role", "leader", "writing", "applied", "orders"}``. When the leader dies (even
``SIGKILL``), its lease ends and another instance takes the log over, fencing the old writer:
every order that got a 2xx is still there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any, final

import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, RedirectResponse
from orders_state import Orders, argument_parser, check_order, encode

import walkit
from walkit.recipes import LeaderElection

#: Largest request head (request line and headers) uvicorn's h11 front buffers; past it, 431.
MAX_HEAD = 16 * 1024
#: Largest order body; past it, 413. uvicorn sets no limit, and Starlette's ``request.json()``
#: would hold a body of any size in memory.
MAX_BODY = 64 * 1024


@final
class OrderService:
    """The walkit side of the app: the client, the log, the election and the state."""

    def __init__(self, url: str, log_name: str, advertise: str, lease_timeout: float) -> None:
        self.url = url
        self.log_name = log_name
        self.orders = Orders()
        self.writer: walkit.LogWriter | None = None
        self.election = LeaderElection(
            url,
            f"/services/orders/{log_name}",
            advertise,
            lease_timeout=lease_timeout,
            rng=random.Random(),
        )
        self._applied = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with (
            walkit.Client.connect(self.url) as client,
            walkit.Log.open(client, self.log_name) as log,
        ):
            background = [
                asyncio.create_task(self._tail(log)),
                asyncio.create_task(self.election.run()),
                asyncio.create_task(self._lead(log)),
            ]
            try:
                yield
            finally:
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)

    async def _tail(self, log: walkit.Log) -> None:
        """Apply every record of the log, in order, as it becomes readable."""
        async for record in log.reader(walkit.LogPosition.EARLIEST):
            self.orders.apply(record.position, record.payload)
            async with self._applied:
                self._applied.notify_all()

    async def _lead(self, log: walkit.Log) -> None:
        """Own the log's writer while this instance holds the lease."""
        election = self.election
        while True:
            seen = election.generation
            if not election.is_leader:
                await election.wait_changed(seen)
                continue
            try:
                async with log.writer() as writer:  # fences the previous writer
                    self.writer = writer
                    while election.is_leader:
                        await election.wait_changed(election.generation)
            except walkit.WalkitError:
                pass  # fenced or failed: the election decides who writes next
            finally:
                self.writer = None

    async def place(self, order: dict[str, Any]) -> tuple[str, walkit.LogPosition]:
        writer = self.writer
        if writer is None:  # a follower, or a leader still taking the log over
            election = self.election
            raise LookupError(None if election.is_leader else election.leader)
        order_id, record = encode(order)
        position = await writer.append(record)  # durable when it returns
        async with self._applied:  # read-your-writes: answer once it is applied here too
            await self._applied.wait_for(lambda: self.orders.has_applied(position))
        return order_id, position


async def _bounded_body(request: Request) -> bytes:
    """The request's body, or 413 once it is known to be over ``MAX_BODY`` (from its
    ``Content-Length`` before it arrives, else as it arrives: uvicorn stops reading while the
    app has not taken what arrived, so no more than that is held)."""
    # Connection: close, or uvicorn would read (and drop) the rest of the body, however long.
    too_big = HTTPException(413, f"body over {MAX_BODY} bytes", {"connection": "close"})
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY:
        raise too_big
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise too_big
    return bytes(body)


def create_app(service: OrderService) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with service.running():
            yield

    app = FastAPI(title="walkit orders", lifespan=lifespan)

    @app.post("/orders", status_code=201)
    async def place_order(request: Request) -> Any:
        try:
            order = check_order(json.loads(await _bounded_body(request)))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        try:
            order_id, position = await service.place(order)
        except LookupError as leader:
            if leader.args[0]:
                return RedirectResponse(f"http://{leader.args[0]}/orders", status_code=307)
            raise HTTPException(503, "no leader yet") from None
        except walkit.WalkitError as exc:
            raise HTTPException(503, f"not stored: {exc}") from None
        return {"id": order_id, "position": str(position)}

    @app.get("/orders/{order_id}")
    async def get_order(order_id: str) -> Any:
        order = service.orders.by_id.get(order_id)
        if order is None:
            raise HTTPException(404, "no such order")
        return order

    @app.get("/status")
    async def status() -> Any:
        election = service.election
        return JSONResponse(
            service.orders.status(
                election.role.value, election.leader, writing=service.writer is not None
            )
        )

    return app


def main() -> None:
    parser = argument_parser(__doc__.split("\n\n")[0])
    args = parser.parse_args()
    host, _, port = args.http.rpartition(":")
    service = OrderService(args.metadata, args.log, args.http, args.lease_timeout)
    # uvicorn says "Uvicorn running on http://HOST:PORT" once it serves. On h11 with a bound
    # on an unfinished head: on httptools (uvicorn's pick when it is installed) a header line
    # that never ends grows without bound (uvicorn #157), and the limit cannot be set.
    # uvicorn has no deadline for a request head to arrive, nor for a peer to take its
    # answers: docs/kv.md ("Why this server") says what to put in front of it.
    uvicorn.run(
        create_app(service),
        host=host,
        port=int(port),
        access_log=False,
        http="h11",
        h11_max_incomplete_event_size=MAX_HEAD,
    )


if __name__ == "__main__":
    main()
