"""This machine's raw limits, measured in the same run as a benchmark.

Other benchmarks import these and report their figures as ratios of them::

    from bench._limits import measure_all
    limits = measure_all(tmp_dir)
    limits["fdatasync_4k_per_s"], limits["fdatasync_4k_p50_ms"], limits["fsync_1m_mib_s"]

Every function is self-contained (plain ``os`` calls, one subprocess for the loopback test) and
bounded in time. Run ``python -m bench._limits [DIR]`` to print them.
"""

from __future__ import annotations

import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


def fdatasync_4k(directory: str | Path, *, seconds: float = 2.0) -> dict[str, float]:
    """Append 4 KiB + fdatasync in a loop: syncs per second and the p50 of one (ms)."""
    path = Path(directory) / "limits-fdatasync.bin"
    block = b"\xa5" * 4096
    lat: list[float] = []
    fd = os.open(path, _FLAGS, 0o644)
    try:
        start = time.perf_counter()
        end = start + seconds
        now = start
        while now < end:
            t0 = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            now = time.perf_counter()
            lat.append(now - t0)
        elapsed = now - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {
        "fdatasync_4k_per_s": len(lat) / elapsed,
        "fdatasync_4k_p50_ms": statistics.median(lat) * 1e3,
    }


def fsync_1m(
    directory: str | Path, *, total_mib: int = 512, direct: bool = False
) -> dict[str, float]:
    """Write 1 MiB + fsync, repeatedly: sustained MiB/s (``fsync_1m_mib_s``).

    ``direct``: with O_DIRECT from one reused aligned buffer, no copy into the page cache:
    what the disk itself takes (``fsync_1m_direct_mib_s``; 0 where the file system refuses
    O_DIRECT). On a virtual machine whose freed memory goes back to the host, the buffered
    figure is bound by the copy into fresh page-cache pages and moves with the state of the
    guest's memory; this one does not."""
    key = "fsync_1m_direct_mib_s" if direct else "fsync_1m_mib_s"
    path = Path(directory) / "limits-fsync.bin"
    block = mmap.mmap(-1, 1 << 20)  # (page-aligned, as O_DIRECT needs)
    block.write(os.urandom(1 << 20))
    try:
        fd = os.open(path, _FLAGS | (os.O_DIRECT if direct else 0), 0o644)
    except OSError:
        if not direct:
            raise
        return {key: 0.0}
    try:
        start = time.perf_counter()
        for _ in range(total_mib):
            os.write(fd, block)
            os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {key: total_mib / elapsed}


def copy_1m(directory: str | Path, *, total_mib: int = 256) -> dict[str, float]:
    """Copy a file on the same disk, 1 MiB at a time: read it (64 KiB reads; the file is
    written with O_DIRECT where possible and dropped from the page cache first, as a bookie's
    entry logs are), write it to a second file, fsync after every MiB. The disk's own bound for
    any copier that must read what it writes, such as rereplication on a one-disk machine."""
    source = Path(directory) / "limits-copy-src.bin"
    target = Path(directory) / "limits-copy-dst.bin"
    block = os.urandom(1 << 20)
    fd = os.open(source, _FLAGS, 0o644)
    try:
        for _ in range(total_mib):
            os.write(fd, block)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    src = os.open(source, os.O_RDONLY)
    dst = os.open(target, _FLAGS, 0o644)
    try:
        start = time.perf_counter()
        for i in range(total_mib):
            chunk = b"".join(os.pread(src, 65536, i * (1 << 20) + j * 65536) for j in range(16))
            os.write(dst, chunk)
            os.fsync(dst)
        elapsed = time.perf_counter() - start
    finally:
        os.close(src)
        os.close(dst)
        source.unlink(missing_ok=True)
        target.unlink(missing_ok=True)
    return {"copy_1m_mib_s": total_mib / elapsed}


_ECHO_SERVER = r"""
import sys, trio
async def handler(stream):
    try:
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            await stream.send_all(data)
    except trio.BrokenResourceError:
        pass
async def main():
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(listeners[0].socket.getsockname()[1], flush=True)
    await trio.serve_listeners(handler, listeners)
trio.run(main)
"""


def loopback_round_trips(
    *, seconds: float = 1.5, frame_size: int = 100, in_flight: int = 128
) -> dict[str, float]:
    """trio over loopback to an echo server in another process.

    Returns one-at-a-time round trips per second and their p50 (ms), and the rate with
    ``in_flight`` frames outstanding (frames coalesced into one send, as a real client does).
    """
    import trio

    proc = subprocess.Popen([sys.executable, "-c", _ECHO_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        result: dict[str, float] = {}

        async def receive_exactly(stream: trio.SocketStream, size: int) -> None:
            got = 0
            while got < size:
                data = await stream.receive_some(max(size - got, 65536))
                if not data:
                    raise ConnectionError("echo server closed")
                got += len(data)

        async def run() -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            frame = b"x" * frame_size
            lat: list[float] = []
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                await stream.send_all(frame)
                await receive_exactly(stream, frame_size)
                lat.append(time.perf_counter() - t0)
            result["loopback_rtt_per_s"] = len(lat) / sum(lat)
            result["loopback_rtt_p50_ms"] = statistics.median(lat) * 1e3
            # Pipelined: keep ``in_flight`` frames outstanding, send and receive in batches.
            batch = frame * in_flight
            count = 0
            start = time.perf_counter()
            end = start + seconds
            async with trio.open_nursery() as nursery:
                sent = trio.Semaphore(4)  # up to 4 batches in the pipe at once

                async def reader() -> None:
                    nonlocal count
                    while True:
                        await receive_exactly(stream, len(batch))
                        count += in_flight
                        sent.release()

                nursery.start_soon(reader)
                while time.perf_counter() < end:
                    await sent.acquire()
                    await stream.send_all(batch)
                nursery.cancel_scope.cancel()
            result["loopback_pipelined_per_s"] = count / (time.perf_counter() - start)
            await stream.aclose()

        trio.run(run)
        return result
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def measure_all(directory: str | Path | None = None) -> dict[str, Any]:
    """Every limit above, measured now (about 6 s)."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        limits: dict[str, Any] = {}
        limits.update(fdatasync_4k(tmp))
        limits.update(fsync_1m(tmp))
        limits.update(fsync_1m(tmp, direct=True))
        limits.update(loopback_round_trips())
        return limits


def _main() -> None:
    directory = sys.argv[1] if len(sys.argv) > 1 else None
    for key, value in measure_all(directory).items():
        print(f"{key:28} {value:12.3f}")


if __name__ == "__main__":
    _main()
