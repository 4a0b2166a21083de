"""Network namespaces for fault tests: each bookie behind its own link, faults in the kernel.

A :class:`NetLab` makes a Linux bridge in the root namespace (``10.77.N.1/24``, ``N`` a subnet
no other interface uses) and, per node, a network namespace joined to the bridge by a veth
pair, with the address ``10.77.N.(10+i)``. Processes started with :meth:`Node.exec_prefix` run
inside the node's namespace, so what they send crosses the node's link, and the faults act on
real TCP:

- :meth:`NetLab.link_down` / :meth:`NetLab.link_up`: the node's link goes down (the bridge side
  of its veth), a partition: packets are dropped, connections stall until their timeouts.
- :meth:`NetLab.drop`: an nftables rule in the node's namespace drops every packet to and from
  it (a partition that leaves the link up).
- :meth:`NetLab.loss`: each packet to and from the node is dropped with a probability (``tc
  netem loss`` where the kernel has netem, else nftables ``numgen random``: the same effect).
- :meth:`NetLab.delay`: ``tc netem delay`` on both ends of the node's link (needs netem).
- :meth:`NetLab.throttle`: a token bucket (``tc tbf``) on both ends: a slow link, where
  queueing adds the delay.
- :meth:`NetLab.heal`: undo every fault of a node.

Names are unique per lab (``wf`` + 6 hex digits), and :meth:`NetLab.close` (also on a failed
setup) removes the namespaces, the veths and the bridge; :func:`leftovers` lists what of a lab
is still there. Needs root, ``ip``, ``tc`` and ``nft``: :func:`netns_problem` says what is
missing.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import secrets
import shutil
import subprocess
from typing import Final

import attrs

SUBNET_PREFIX: Final = "10.77"
NFT_TABLE: Final = "walkit_fault"


class NetnsError(RuntimeError):
    """A command that sets up or changes the lab failed."""


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


@functools.cache
def netns_problem() -> str | None:
    """Why namespace tests cannot run here (None if they can): tried once, for real."""
    if os.geteuid() != 0:
        return "needs root and ip netns (run the tests as root)"
    for tool in ("ip", "tc", "nft"):
        if shutil.which(tool) is None:
            return f"needs root and ip netns: {tool!r} is not installed"
    name = f"wfprobe{os.getpid() % 100000}"
    try:
        run("ip", "netns", "add", name)
    except (NetnsError, OSError) as exc:
        return f"needs root and ip netns: {exc}"
    try:
        run("ip", "link", "add", f"{name}a", "type", "veth", "peer", "name", f"{name}b")
        run("ip", "link", "del", f"{name}a")
        run("ip", "netns", "exec", name, "nft", "list", "tables")
    except (NetnsError, OSError) as exc:
        return f"needs root, ip netns, veth and nftables: {exc}"
    finally:
        run("ip", "netns", "del", name, check=False)
    return None


@functools.cache
def has_netem() -> bool:
    """Whether the kernel has ``sch_netem`` (``tc qdisc ... netem``)."""
    name = f"wfnetem{os.getpid() % 100000}"
    run("ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}p", check=False)
    try:
        added = run("tc", "qdisc", "add", "dev", name, "root", "netem", "delay", "1ms", check=False)
        return added.returncode == 0
    finally:
        run("ip", "link", "del", name, check=False)


def _free_subnet() -> int:
    used = set()
    for match in re.finditer(
        rf"inet {re.escape(SUBNET_PREFIX)}\.(\d+)\.", run("ip", "-o", "addr").stdout
    ):
        used.add(int(match.group(1)))
    for n in range(1, 255):
        candidate = (secrets.randbelow(254) + n) % 254 + 1
        if candidate not in used:
            return candidate
    raise NetnsError(f"no free {SUBNET_PREFIX}.N.0/24 subnet")


@attrs.define
class Node:
    """One namespace on the lab's bridge."""

    netns: str
    host_if: str  # the root namespace's end of the veth (on the bridge)
    ns_if: str  # the end inside the namespace
    address: str

    def exec_prefix(self) -> list[str]:
        """Prefix a command with this to run it inside the namespace."""
        return ["ip", "netns", "exec", self.netns]


@attrs.define
class NetLab:
    """A bridge and namespaces on it; see the module docstring. Use as a context manager."""

    tag: str = attrs.field(factory=lambda: secrets.token_hex(3))
    subnet: int = 0
    nodes: list[Node] = attrs.field(factory=list)
    bridge: str = ""
    gateway: str = ""

    @property
    def prefix(self) -> str:
        return f"wf{self.tag}"

    def __enter__(self) -> NetLab:
        try:
            self.subnet = _free_subnet()
            self.bridge = f"{self.prefix}br"
            self.gateway = f"{SUBNET_PREFIX}.{self.subnet}.1"
            run("ip", "link", "add", self.bridge, "type", "bridge")
            run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_node(self) -> Node:
        i = len(self.nodes)
        node = Node(
            netns=f"{self.prefix}n{i}",
            host_if=f"{self.prefix}h{i}",
            ns_if=f"{self.prefix}v{i}",
            address=f"{SUBNET_PREFIX}.{self.subnet}.{10 + i}",
        )
        self.nodes.append(node)  # before creating anything: close() removes what exists
        ns = ("ip", "-n", node.netns)
        run("ip", "netns", "add", node.netns)
        run("ip", "link", "add", node.host_if, "type", "veth", "peer", "name", node.ns_if)
        run("ip", "link", "set", node.ns_if, "netns", node.netns)
        run("ip", "link", "set", node.host_if, "master", self.bridge)
        run("ip", "link", "set", node.host_if, "up")
        run(*ns, "addr", "add", f"{node.address}/24", "dev", node.ns_if)
        run(*ns, "link", "set", node.ns_if, "up")
        run(*ns, "link", "set", "lo", "up")
        run(*ns, "route", "add", "default", "via", self.gateway)
        return node

    # --- faults ------------------------------------------------------------------------------

    def link_down(self, node: Node) -> None:
        run("ip", "link", "set", node.host_if, "down")

    def link_up(self, node: Node) -> None:
        run("ip", "link", "set", node.host_if, "up")

    def _nft(self, node: Node, script: str) -> None:
        done = subprocess.run(
            [*node.exec_prefix(), "nft", "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise NetnsError(f"nft in {node.netns} failed: {done.stderr.strip()}\n{script}")

    def _nft_rule(self, node: Node, rule: str) -> None:
        self._clear_nft(node)
        self._nft(
            node,
            f"table inet {NFT_TABLE} {{\n"
            f"  chain in {{ type filter hook input priority 0; iifname {node.ns_if} {rule}; }}\n"
            f"  chain out {{ type filter hook output priority 0; oifname {node.ns_if} {rule}; }}\n"
            "}\n",
        )

    def _clear_nft(self, node: Node) -> None:
        run(*node.exec_prefix(), "nft", "delete", "table", "inet", NFT_TABLE, check=False)

    def drop(self, node: Node) -> None:
        """Drop every packet to and from the node (its link stays up)."""
        self._nft_rule(node, "drop")

    def loss(self, node: Node, percent: int) -> None:
        """Drop each packet to and from the node with probability ``percent`` %."""
        if not 0 < percent < 100:
            raise ValueError(f"loss must be between 1 and 99 %, not {percent}")
        if has_netem():
            self._qdisc(node, "netem", "loss", f"{percent}%")
        else:
            self._nft_rule(node, f"numgen random mod 100 < {percent} drop")

    def delay(self, node: Node, ms: int, jitter_ms: int = 0) -> None:
        """Delay each packet to and from the node (``tc netem``: the kernel must have it)."""
        if not has_netem():
            raise NetnsError("this kernel has no sch_netem (tc qdisc ... netem)")
        self._qdisc(node, "netem", "delay", f"{ms}ms", f"{jitter_ms}ms")

    def throttle(self, node: Node, rate: str = "2mbit", latency_ms: int = 400) -> None:
        """A slow link: a token bucket of ``rate`` each way, queueing up to ``latency_ms``."""
        self._qdisc(node, "tbf", "rate", rate, "burst", "16kb", "latency", f"{latency_ms}ms")

    def _qdisc(self, node: Node, *spec: str) -> None:
        self._clear_qdiscs(node)
        run("tc", "qdisc", "add", "dev", node.host_if, "root", *spec)
        run(*node.exec_prefix(), "tc", "qdisc", "add", "dev", node.ns_if, "root", *spec)

    def _clear_qdiscs(self, node: Node) -> None:
        run("tc", "qdisc", "del", "dev", node.host_if, "root", check=False)
        run(*node.exec_prefix(), "tc", "qdisc", "del", "dev", node.ns_if, "root", check=False)

    def heal(self, node: Node | None = None) -> None:
        """Undo every fault of ``node`` (of every node when None)."""
        for n in [node] if node is not None else self.nodes:
            self._clear_nft(n)
            self._clear_qdiscs(n)
            self.link_up(n)

    # --- teardown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Remove every namespace, veth and the bridge (what exists; errors are ignored so that
        one failure does not leave the rest behind). Processes in the namespaces must have been
        stopped first, else their namespace lives on, nameless, until they exit."""
        for node in self.nodes:
            run("ip", "netns", "del", node.netns, check=False)
            run("ip", "link", "del", node.host_if, check=False)
        if self.bridge:
            run("ip", "link", "del", self.bridge, check=False)
        self.nodes = [] if not leftovers(self.prefix) else self.nodes


def leftovers(prefix: str) -> list[str]:
    """Namespaces and links whose names start with ``prefix`` (e.g. a lab's ``wfXXXXXX``)."""
    names = [line.split()[0] for line in run("ip", "netns", "list").stdout.splitlines() if line]
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in run("ip", "-o", "link").stdout.splitlines()
        if ":" in line
    ]
    return [n for n in [*names, *links] if n.startswith(prefix)]


def address_in_lab(address: str, lab: NetLab) -> bool:
    network = ipaddress.ip_network(f"{SUBNET_PREFIX}.{lab.subnet}.0/24")
    return ipaddress.ip_address(address) in network
