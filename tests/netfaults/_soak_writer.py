"""A log writer process for the chaos soak: takes the log over, then appends until killed,
fenced or failed.

    python _soak_writer.py METADATA_URL LOG NAME

Prints ``WRITER <name>`` once it holds the log, then ``ACK <position> <payload>`` for every
acknowledged record, flushed at once, so the parent knows exactly what was acknowledged (a
record acknowledged just before a SIGKILL may go unprinted: the parent then does not count
it, which errs the safe way). Exits 3 when fenced out, 4 on another error.
"""

from __future__ import annotations

import os
import sys

import trio

import walkit

PASSWORD = b"soak"


def say(line: str) -> None:
    """One line to stdout in one write: the parent reads stderr from the same pipe, and a log
    line from another thread (kazoo's) must not land inside this one, as print() allows by
    writing the text and its newline apart."""
    os.write(1, f"{line}\n".encode())


#: Short timeouts: a bookie that is cut off, stalled or slow is replaced in seconds.
TIMEOUT = 2.0


async def main(url: str, log_name: str, name: str) -> None:
    async with walkit.Client.connect(
        url, add_timeout=TIMEOUT, read_timeout=TIMEOUT, connect_timeout=TIMEOUT
    ) as client:
        log = await walkit.Log.open(
            client,
            log_name,
            ensemble_size=3,
            write_quorum=3,
            ack_quorum=2,
            password=PASSWORD,
            roll_entries=400,
        )
        try:
            async with log.writer() as writer:
                say(f"WRITER {name}")
                n = 0
                while True:
                    payload = f"{name}-{n}".encode()
                    position = await writer.append(payload)
                    say(f"ACK {position} {payload.decode()}")
                    n += 1
        except walkit.WriterFencedError as exc:
            say(f"FENCED {type(exc).__name__}")
            sys.exit(3)
        except walkit.WalkitError as exc:
            say(f"ERROR {type(exc).__name__}: {exc}")
            sys.exit(4)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
