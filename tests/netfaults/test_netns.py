"""The namespace lab itself: faults cut real traffic and heal, and nothing is left behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.netfaults._lab import skip_without_netns
from tests.netfaults._netns import NetLab, Node, leftovers, netns_problem


@contextmanager
def echo_server(node: Node) -> Iterator[tuple[str, int]]:
    """A TCP echo server inside ``node``'s namespace, on its address."""
    code = (
        "import socket, sys\n"
        f"s = socket.create_server(({node.address!r}, 0))\n"
        "print(s.getsockname()[1], flush=True)\n"
        "while True:\n"
        "    c, _ = s.accept()\n"
        "    c.sendall(c.recv(100))\n"
        "    c.close()\n"
    )
    proc = subprocess.Popen(
        [*node.exec_prefix(), sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield node.address, int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait(timeout=10)


def echoes(address: tuple[str, int], timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(address, timeout=timeout) as s:
            s.sendall(b"ping")
            return s.recv(100) == b"ping"
    except OSError:
        return False


def test_faults_cut_real_traffic_and_heal() -> None:
    skip_without_netns()
    with NetLab() as lab:
        node = lab.add_node()
        with echo_server(node) as address:
            assert echoes(address)
            for fault in (lab.link_down, lab.drop):
                fault(node)
                assert not echoes(address)
                lab.heal(node)
                assert echoes(address, timeout=5)
            lab.throttle(node, "1mbit")
            assert echoes(address, timeout=5)  # slow, not cut
            lab.heal(node)
            lab.loss(node, 99)
            assert not any(echoes(address, timeout=0.5) for _ in range(3))
            lab.heal()
            assert echoes(address, timeout=5)
    assert leftovers(lab.prefix) == []


def test_a_failed_run_leaves_nothing_behind() -> None:
    skip_without_netns()
    with pytest.raises(RuntimeError, match="boom"), NetLab() as lab:
        lab.add_node()
        lab.add_node()
        lab.drop(lab.nodes[0])
        assert len(leftovers(lab.prefix)) == 5  # 2 namespaces, 2 veths, the bridge
        raise RuntimeError("boom")
    assert leftovers(lab.prefix) == []
    # A node that fails half-way through its setup is removed too.
    with pytest.raises(Exception, match="exists"), NetLab() as lab:
        lab.add_node()
        lab.nodes.pop()  # forget it: the next node takes its names and fails
        lab.add_node()
    assert leftovers(lab.prefix) == []


def test_without_root_the_tests_skip_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    netns_problem.cache_clear()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    try:
        assert netns_problem() == "needs root and ip netns (run the tests as root)"
        with pytest.raises(pytest.skip.Exception, match="needs root and ip netns"):
            skip_without_netns()
    finally:
        netns_problem.cache_clear()
