"""wrk (Debian ``wrk``, C) as the load generator of bench/kv.py, with ``bench/kv_wrk.lua``.

    result = run("http://127.0.0.1:8001", "kv-put", seconds=5, connections=64, tag="p1")
    result["per_s"], result["p50_ms"], result["p99_ms"], result["non_2xx"], result["ok"]

wrk spends ~10-20 µs of CPU per request (the Python load client ~180 µs), so on a 2-core
machine it leaves the CPU to the servers it measures.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "kv_wrk.lua"
INSTALL = ROOT / "scripts" / "install-bench-peers.sh"

#: The modes kv_wrk.lua knows.
MODES = ("kv-put", "kv-get", "etcd-put", "etcd-get", "etcd-get-serializable")


def ensure_installed() -> None:
    """Install wrk and etcd (Debian packages, through scripts/install-bench-peers.sh) if
    either is missing."""
    if shutil.which("wrk") and shutil.which("etcd"):
        return
    print(f"kv bench: wrk or etcd is missing; running {INSTALL.relative_to(ROOT)}", flush=True)
    subprocess.run(["bash", str(INSTALL)], check=True)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(
    url: str,
    mode: str,
    *,
    seconds: float,
    connections: int,
    threads: int = 2,
    tag: str = "k",
    value_size: int = 100,
    keys: int = 1000,
) -> dict[str, float]:
    """One wrk run; the answers it counted, per second, latency percentiles (ms), non-2xx
    answers, socket errors, misses (etcd reads that found no key) and wrk's own CPU (s)."""
    if mode not in MODES:
        raise ValueError(f"unknown wrk mode {mode!r}; one of {', '.join(MODES)}")
    args = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(SCRIPT),
        url,
        "--",
        mode,
        str(value_size),
        tag,
        str(keys),
    ]
    cpu = _children_cpu()
    done = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 60)
    cpu = _children_cpu() - cpu
    line = next((x for x in done.stdout.splitlines() if x.startswith("wrk-result ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()}{done.stdout}")
    r = json.loads(line.removeprefix("wrk-result "))
    duration = r["duration_us"] / 1e6
    ok = r["requests"] - r["non_2xx"] - r["misses"]
    return {
        "requests": float(r["requests"]),
        "ok": float(ok),
        "per_s": ok / duration,
        "p50_ms": r["p50_us"] / 1e3,
        "p99_ms": r["p99_us"] / 1e3,
        "max_ms": r["max_us"] / 1e3,
        "non_2xx": float(r["non_2xx"]),
        "errors": float(r["errors"]),
        "misses": float(r["misses"]),
        "client_cpu_s": cpu,
    }
