"""A writer or a reader of one log, run as a program by the rolling-upgrade test under an old
walkit or under the working tree. It uses only what walkit 0.1.0 had (Client.connect, Log.open,
log.writer(), append, log.reader(follow=False)).

    python _log_client.py write URL LOG TAG   appends TAG-0, TAG-1, ... and prints
                                              "ACK <position> <payload>" for each durable one,
                                              until a line "stop" on stdin
    python _log_client.py read URL LOG        prints "REC <position> <payload>" for every
                                              record, then "END"

Both print "VERSION <walkit version> <file of the walkit package>" first. Both connect with
``wall_clock=None``, as docs/operations.md ("Upgrades") asks of writers while readers of the
release remain: a stamped record is a record set of a version the release cannot read. A writer whose
append fails (a bookie went away mid-change) prints "ERR ..." and takes the log over again:
what an application does; records whose append failed are not acknowledged.
"""

from __future__ import annotations

import sys

import trio

import walkit
from walkit import Client, Log, WalkitError


def say(*parts: object) -> None:
    print(*parts, flush=True)


async def write(url: str, name: str, tag: str) -> None:
    stop = trio.Event()

    async def watch_stdin() -> None:
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            if not line or line.strip() == "stop":
                stop.set()
                return

    count = 0
    # E=3, Qw=3, Qa=2 over four bookies: appends go on while one bookie is away.
    async with (
        Client.connect(url, wall_clock=None) as client,
        Log.open(client, name, ensemble_size=3, write_quorum=3, ack_quorum=2) as log,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(watch_stdin)
        while not stop.is_set():
            try:
                async with log.writer() as writer:
                    while not stop.is_set():
                        payload = f"{tag}-{count}"
                        count += 1
                        pos = await writer.append(payload.encode())
                        say("ACK", pos, payload)
                        await trio.sleep(0.002)  # (a steady trickle, not a flood)
            except WalkitError as exc:
                say("ERR", type(exc).__name__, str(exc).replace("\n", " "))
        nursery.cancel_scope.cancel()
    say("DONE", count)


async def read(url: str, name: str) -> None:
    async with (
        Client.connect(url, wall_clock=None) as client,
        Log.open(client, name, create=False) as log,
    ):
        async for record in log.reader(follow=False):
            say("REC", record.position, record.payload.decode())
    say("END")


def main() -> None:
    say("VERSION", walkit.__version__, walkit.__file__)
    command, url, name, *rest = sys.argv[1:]
    if command == "write":
        trio.run(write, url, name, rest[0])
    else:
        trio.run(read, url, name)


if __name__ == "__main__":
    main()
