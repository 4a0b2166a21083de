"""Orders on a walkit log, served by Flask under waitress (threads): ``walkit.sync``.

::

    python examples/flask_orders.py --metadata URL --http 127.0.0.1:8201 [--log orders]

The same service as ``fastapi_orders.py``, for a threaded program: waitress answers each
request in one of its threads, and every thread calls the blocking API. Two (or more)
instances on one log elect a leader (``walkit.sync.LeaderElection``), which owns the log's
writer; ``POST /orders`` answers ``201 {"id", "position"}`` once the order is durable and
applied here (``307`` to the leader from a follower), ``GET /orders/{id}`` reads the state a
background thread tails from the log, and ``GET /status`` says ``{"role", "leader", "writing",
"applied", "orders"}``. When the leader is SIGKILLed another instance takes the log over.
"""

from __future__ import annotations

import threading
from typing import Any, final

import waitress
from flask import Flask, jsonify, redirect, request
from orders_state import Orders, argument_parser, check_order, encode

import walkit
import walkit.sync

#: How long the background threads wait at a time before looking whether to stop.
_WAIT = 0.5
#: waitress's bounds (its defaults are a 256 KiB head, a 1 GiB body, 100 connections on
#: select(), and 120 s of inactivity). It counts a head's bytes as they arrive (431 past the
#: limit), refuses a body over its limit (413), stops reading a connection whose answers are
#: not taken, and closes one with nothing sent or received for ``channel_timeout``. It has no
#: deadline for a head that keeps arriving slowly: docs/kv.md ("Why this server").
WAITRESS_LIMITS: dict[str, Any] = {
    "max_request_header_size": 16 * 1024,
    "max_request_body_size": 64 * 1024,
    "connection_limit": 1000,
    "asyncore_use_poll": True,  # select() cannot watch descriptors past 1,023
    "channel_timeout": 30,
}


@final
class OrderService:
    """The walkit side: the client, the log, the election, the state and two threads."""

    def __init__(self, url: str, log_name: str, advertise: str, lease_timeout: float) -> None:
        self.orders = Orders()
        self.writer: walkit.sync.LogWriter | None = None
        self._applied = threading.Condition()
        self._stopping = threading.Event()
        self.client = walkit.sync.Client.connect(url)
        self.log = walkit.sync.Log.open(self.client, log_name)
        self.election = walkit.sync.LeaderElection(
            url, f"/services/orders/{log_name}", advertise, lease_timeout=lease_timeout
        )
        self._threads = [
            threading.Thread(target=self._tail, name="orders-tail", daemon=True),
            threading.Thread(target=self._lead, name="orders-lead", daemon=True),
        ]

    def start(self) -> None:
        self.election.start()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join()
        self.election.stop()
        self.log.close()
        self.client.close()

    def _tail(self) -> None:
        reader = self.log.reader(walkit.LogPosition.EARLIEST)
        while not self._stopping.is_set():
            record = reader.next(timeout=_WAIT)  # a bounded wait: the thread can stop
            if record is None:
                continue
            with self._applied:
                self.orders.apply(record.position, record.payload)
                self._applied.notify_all()

    def _lead(self) -> None:
        election = self.election
        while not self._stopping.is_set():
            if not election.is_leader:
                election.wait_changed(election.generation, timeout=_WAIT)
                continue
            try:
                with self.log.writer() as writer:  # fences the previous writer
                    self.writer = writer
                    while election.is_leader and not self._stopping.is_set():
                        election.wait_changed(election.generation, timeout=_WAIT)
            except walkit.WalkitError:
                pass  # fenced or failed: the election decides who writes next
            finally:
                self.writer = None

    def place(self, order: dict[str, Any]) -> tuple[str, walkit.LogPosition]:
        writer = self.writer
        if writer is None:  # a follower, or a leader still taking the log over
            election = self.election
            raise LookupError(None if election.is_leader else election.leader)
        order_id, record = encode(order)
        position = writer.append(record)  # durable when it returns
        with self._applied:  # read-your-writes: answer once it is applied here too
            self._applied.wait_for(lambda: self.orders.has_applied(position))
        return order_id, position


def create_app(service: OrderService) -> Flask:
    app = Flask("walkit-orders")

    @app.post("/orders")
    def place_order() -> Any:
        try:
            order = check_order(request.get_json(force=True, silent=True))
        except ValueError as exc:
            return jsonify(error=str(exc)), 400
        try:
            order_id, position = service.place(order)
        except LookupError as leader:
            if leader.args[0]:
                return redirect(f"http://{leader.args[0]}/orders", code=307)
            return jsonify(error="no leader yet"), 503
        except walkit.WalkitError as exc:
            return jsonify(error=f"not stored: {exc}"), 503
        return jsonify(id=order_id, position=str(position)), 201

    @app.get("/orders/<order_id>")
    def get_order(order_id: str) -> Any:
        order = service.orders.by_id.get(order_id)
        if order is None:
            return jsonify(error="no such order"), 404
        return jsonify(order)

    @app.get("/status")
    def status() -> Any:
        election = service.election
        return jsonify(
            service.orders.status(
                election.role.value, election.leader, writing=service.writer is not None
            )
        )

    return app


def main() -> None:
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8, help="waitress's worker threads")
    args = parser.parse_args()
    host, _, port = args.http.rpartition(":")
    service = OrderService(args.metadata, args.log, args.http, args.lease_timeout)
    service.start()
    try:
        server = waitress.create_server(
            create_app(service), host=host, port=int(port), threads=args.threads, **WAITRESS_LIMITS
        )
        print(f"orders: serving http://{args.http}", flush=True)
        server.run()
    finally:
        service.stop()


if __name__ == "__main__":
    main()
