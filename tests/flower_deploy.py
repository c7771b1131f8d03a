"""A Flower deployment on 127.0.0.1 for the tests: a SuperLink, SuperNodes, keys and a connection,
each process started in its own session, tracked by PID and stopped (TERM, then KILL of its group)
when the :class:`Deployment` closes — nothing is left running."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from fedpd.errors import ConfigError
from fedpd.flower.deploy import wait_for_superlink

BIN = Path(sys.executable).parent
ENV = {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
       "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



#: a small deployment run: ALGORITHM, ETA and ROUNDS to fill in
CONFIG = """
[problem]
name = "least_squares"
clients = 6
dim = 3
samples_per_client = 8
[algorithm]
name = "ALGORITHM"
eta = ETA
[solver]
name = "sgd"
lr = 0.05
local_steps = 3
batch_size = 4
[sampler]
name = "uniform"
clients_per_round = 4
[run]
rounds = ROUNDS
eval_every = 1
seed = 4
"""


def metrics(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
            for line in (path / "metrics.jsonl").read_text().splitlines()]


def app(tmp_path: Path, rounds: int, algorithm: str = "afedpd", eta: float = 2.0,
        name: str = "") -> tuple[Path, Path, list[dict]]:
    """(the Flower app of :data:`CONFIG`, its run directory, the in-process metrics of the same
    config); ``name`` tells apart several apps in one folder."""
    from fedpd import run
    from fedpd.cli import main

    suffix = f"-{name}" if name else ""
    cfg = tmp_path / f"run{suffix}.toml"
    cfg.write_text(CONFIG.replace("ALGORITHM", algorithm).replace("ETA", str(eta)).replace("ROUNDS", str(rounds)))
    expected = [{k: v for k, v in r.items() if k != "wall_s"} for r in run(cfg).history]
    run_dir = tmp_path / f"run{suffix}"
    appdir = tmp_path / f"app{suffix}"
    if main(["flower", "app", str(cfg), "--out", str(appdir), "--run-dir", str(run_dir)]) != 0:
        raise RuntimeError("fedpd flower app failed")
    return appdir, run_dir, expected

class Deployment:
    """``tls``: the SuperLink speaks TLS with certificates from ``fedpd flower certs``; ``auth``:
    it only admits SuperNodes whose public key was registered (needs TLS)."""

    def __init__(self, root: Path, tls: bool = True, auth: bool = True):
        self.root, self.tls, self.auth = Path(root), tls, auth
        self.root.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **ENV, "FLWR_HOME": str(self.root / "flwr_home"),
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # Flower spawns its own commands
        self.procs: dict[str, subprocess.Popen] = {}
        self.runtime: dict[str, int] = {}  # a SuperNode's Runtime API port, by name
        self.port = free_port()
        self.certs = self.root / "certs"
        if tls:
            from fedpd.flower.deploy import make_certificates

            make_certificates(self.certs, nodes=3)
        home = Path(self.env["FLWR_HOME"])
        home.mkdir(exist_ok=True)
        security = f'root-certificates = "{self.certs / "ca.crt"}"' if tls else "insecure = true"
        (home / "config.toml").write_text(f'[superlink]\ndefault = "test"\n\n[superlink.test]\n'
                                          f'address = "127.0.0.1:{self.port}"\n{security}\n')

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, cwd=self.root, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def superlink(self) -> None:
        flags = ([f"--ssl-ca-certfile={self.certs / 'ca.crt'}", f"--ssl-certfile={self.certs / 'server.crt'}",
                  f"--ssl-keyfile={self.certs / 'server.key'}"] if self.tls else ["--insecure"])
        if self.auth:
            flags.append("--enable-supernode-auth")
        self.start("superlink", [str(BIN / "flower-superlink"), *flags, "--host", "127.0.0.1", "--port", str(self.port)])
        try:
            wait_for_superlink(f"127.0.0.1:{self.port}", 30)
        except ConfigError:
            raise RuntimeError(f"the SuperLink did not start:\n{self.log('superlink')}") from None

    def register(self, k: int) -> int:
        out = subprocess.run([str(BIN / "flwr"), "supernode", "register", str(self.certs / f"node{k}.pub"), "test",
                              "--format", "json"], env=self.env, capture_output=True, text=True, timeout=60)
        reply = json.loads(out.stdout[out.stdout.index("{"):])
        assert reply.get("success"), out.stdout + out.stderr
        return int(reply["node-id"])

    def supernode(self, k: int, hosted: str, store: Path, key: int | None = None, name: str | None = None,
                  more: str = "", warm: bool = False, runtime: int | None = None):
        """``more``: further node config, e.g. "allowed-plugins='mypkg'"; ``warm``: the node is
        started with ``--isolation process`` and a ``fedpd flower clientapp`` beside it (named
        ``<name>-clientapp``) serves its messages; ``runtime``: the port of the node's Runtime API
        (by default a free one) — a node restarted on its old port is served by the warm process
        already there, so none is started."""
        flags = [f"--root-certificates={self.certs / 'ca.crt'}"] if self.tls else ["--insecure"]
        if key is not None:
            flags.append(f"--auth-supernode-private-key={self.certs / f'node{key}'}")
        config = f"hosted-clients='{hosted}' store-dir='{store}' {more}".strip()
        name, fresh = name or f"supernode{k}", runtime is None
        runtime = runtime or free_port()
        self.runtime[name] = runtime
        node = self.start(name, [str(BIN / "flower-supernode"), *flags, "--superlink", f"127.0.0.1:{self.port}",
                                 "--port", str(runtime), "--node-config", config, "--max-retries", "3",
                                 *(["--isolation", "process"] if warm else [])])
        if warm and fresh:
            self.start(f"{name}-clientapp", [str(BIN / "fedpd"), "flower", "clientapp", "--runtime-api-address",
                                             f"127.0.0.1:{runtime}", "--insecure"])
        return node

    def wait_warm(self, name: str, timeout: float = 120) -> None:
        """Until the warm process beside SuperNode ``name`` serves it (a fedpd without the command
        fails here, instead of a run waiting for its replies)."""
        app, deadline = f"{name}-clientapp", time.time() + timeout
        while "serving the SuperNode" not in self.log(app):
            if self.procs[app].poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the warm ClientApp of {name} is not serving:\n{self.log(app)}")
            time.sleep(0.5)

    def flwr_run(self, appdir: Path, timeout: float = 600, run_config: str | None = None) -> subprocess.CompletedProcess:
        argv = [str(BIN / "flwr"), "run", str(appdir), "test", "--stream"]
        if run_config:
            argv += ["--run-config", run_config]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait()

    def close(self) -> None:
        for proc in reversed(list(self.procs.values())):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.time() + 15
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs.values():  # whatever ignored TERM (SuperExec children included)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

    def __enter__(self) -> "Deployment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
