"""The deployment tests' own harness (tests/flower_deploy.py), which every test that starts Flower
processes uses: nothing such a test started outlives it, however it ends (an error, Ctrl-C, a
pytest worker killed); a doc's fixed ports are held for a test's whole life (the tests of one
machine that use them take turns), and a port another program takes midway stops the doc's
script and skips the test, naming the port and its holder."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from helpers import TESTS


_LINUX = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="follows processes through /proc")

#: a process tree as Flower's make one: a child, and a grandchild in a session of its own that
#: outlives its parent (as a SuperExec helper does); prints the three pids
_TREE = ("sh -c 'setsid sleep 120 & echo $! >> PIDS; sleep 120 & echo $! >> PIDS; echo $$ >> PIDS; wait'")


def _running(pids: list[int]) -> list[int]:
    from flower_deploy import processes

    table = processes()
    return [p for p in pids if p in table and table[p][2] != "Z"]


@_LINUX
@pytest.mark.parametrize("ending", ["SIGINT", "SIGKILL"])
def test_nothing_a_deployment_test_started_outlives_it_however_it_ends(tmp_path, ending):
    """A test process that started a tree of processes (one in a session of its own) and is then
    interrupted (Ctrl-C: SIGINT) or killed outright (a pytest worker killed): the Guard kills them all."""
    import signal
    import subprocess
    import sys

    pids_file = tmp_path / "pids"
    code = (f"import subprocess, sys, time; sys.path.insert(0, {str(TESTS)!r})\n"
            f"from flower_deploy import Guard\n"
            f"guard = Guard()\n"
            f"tree = subprocess.Popen({_TREE.replace('PIDS', str(pids_file))!r}, shell=True, start_new_session=True)\n"
            f"guard.watch(tree.pid)\n"
            f"print('started', flush=True)\n"
            f"time.sleep(120)\n")
    test = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert test.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 20
        while not (pids_file.exists() and len(pids_file.read_text().split()) == 3):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        pids = [int(p) for p in pids_file.read_text().split()]
        time.sleep(1)  # (the guard has seen the tree)
        assert _running(pids) == pids
        test.send_signal(getattr(signal, ending))
        test.wait(20)
        deadline = time.monotonic() + 20
        while _running(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _running(pids), f"left running after {ending}: {_running(pids)}"
    finally:
        if test.poll() is None:
            test.kill()
            test.wait()
        if pids_file.exists():
            for pid in _running([int(p) for p in pids_file.read_text().split()]):
                os.kill(pid, signal.SIGKILL)


def _listener():
    import socket

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


@_LINUX
def test_a_docs_ports_are_held_for_a_tests_whole_life_and_tests_take_turns(tmp_path):
    """Two tests of one port set take turns (the lock); ports another program listens on at the
    start skip the test, naming the port and its holder."""
    import subprocess
    import sys

    from _pytest.outcomes import Skipped

    from flower_deploy import holding_ports

    sock, port = _listener()
    sock.close()  # a port set nobody uses: no other test's
    ports = (port, port + 1)
    hold = (f"import sys, time; sys.path.insert(0, {str(TESTS)!r})\n"
            f"from flower_deploy import holding_ports\n"
            f"with holding_ports({ports!r}):\n"
            f"    print('holding', flush=True); time.sleep(3)\n")
    other = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "holding"
        with pytest.raises(Skipped, match=rf"stayed held by another test \(pid {other.pid}: "):
            with holding_ports(ports, wait=0.5):
                pass
        start = time.monotonic()
        with holding_ports(ports, wait=60):  # the other test's turn ends; then this one's
            assert time.monotonic() - start > 1  # (it waited for the other to finish)
    finally:
        other.kill(), other.wait()
    busy, port = _listener()
    try:
        with pytest.raises(Skipped, match=rf"in use on this machine: {port} \(pid {os.getpid()}: "):
            with holding_ports((port,)):
                pass
    finally:
        busy.close()


@_LINUX
def test_a_port_another_program_takes_midway_stops_the_doc_script_and_skips_naming_it(tmp_path):
    """A doc's script runs; midway a program that is not the script's listens on one of its ports
    (another deployment): the script and what it started are stopped at once, and the test skips
    naming the port and its holder (not 401 errors from Flower much later)."""
    from _pytest.outcomes import Skipped

    from flower_deploy import PortWatch, holding_ports, run_doc_script

    probe, port = _listener()
    probe.close()
    later = []
    timer = threading.Timer(1.0, lambda: later.append(_listener_on(port)))
    with holding_ports((port,)) as ports:
        watch = PortWatch(ports.ports, every=0.5)
        timer.start()
        start = time.monotonic()
        try:
            with pytest.raises(Skipped, match=rf"took the doc's port midway: {port} \(pid {os.getpid()}: "):
                run_doc_script("sleep 60 & CHILD=$!\nsleep 60", tmp_path, dict(os.environ), tmp_path / "log", watch,
                               timeout=60)
        finally:
            timer.join()
            for sock in later:
                sock.close()
    assert time.monotonic() - start < 30


def _listener_on(port: int):
    import socket

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock
