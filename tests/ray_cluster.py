"""A Ray cluster of two nodes on this machine, as on two machines: ``ray start --head`` and
``ray start --address=…``, each with one CPU, in a temporary directory of their own; stopped by
PID (SIGTERM, then SIGKILL of each process group), leaving nothing running."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM (``ray start --block`` tears its processes down), then SIGKILL of the group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def two_node_cluster() -> Iterator[str]:
    """The address (HOST:PORT) of a running two-node cluster with one CPU per node."""
    ray = shutil.which("ray", path=os.path.dirname(sys.executable))
    assert ray, "the ray command comes with flwr[simulation]"
    port = free_port()
    stale = os.path.exists("/tmp/ray/ray_current_cluster")
    temp = tempfile.mkdtemp(prefix="fpray", dir="/tmp")  # Ray's socket paths must stay short
    common = ["--block", "--num-cpus=1", "--disable-usage-stats", f"--temp-dir={temp}"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    procs = [subprocess.Popen([ray, "start", "--head", f"--port={port}", "--include-dashboard=false", *common],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)]
    try:
        time.sleep(4)
        procs.append(subprocess.Popen([ray, "start", f"--address=127.0.0.1:{port}", *common], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, env=env, start_new_session=True))
        deadline, status = time.time() + 90, ""
        while time.time() < deadline:
            status = subprocess.run([ray, "status", f"--address=127.0.0.1:{port}"], capture_output=True, text=True,
                                    env=env).stdout
            if status.count("node_") >= 2 and "/2.0 CPU" in status:  # both nodes joined with their CPU
                break
            time.sleep(1)
        assert status.count("node_") >= 2 and "/2.0 CPU" in status, status
        yield f"127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            _stop(proc)
        if not stale and os.path.exists("/tmp/ray/ray_current_cluster"):
            os.remove("/tmp/ray/ray_current_cluster")
        shutil.rmtree(temp, ignore_errors=True)
