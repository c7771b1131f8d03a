"""A Flower deployment on 127.0.0.1 for the tests: a SuperLink, SuperNodes, keys and a connection,
each process started in its own session, tracked by PID and stopped (TERM, then KILL of its group)
when the :class:`Deployment` closes — nothing is left running.

However a test ends — an error, Ctrl-C (SIGINT to pytest), a pytest worker killed — a
:class:`Guard` (a watchdog process in a session of its own, which Ctrl-C does not reach) follows
every process it was given and those they start, through /proc, and kills what is left by PID
once the test's process closes its pipe or is gone. :func:`holding_ports` holds a doc's fixed
ports for a test's whole life (a lock file per port set: the tests, and CI runs, of one machine
that use them run one after another) and :class:`PortWatch` tells when another program listens
on one of them midway."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ENV = {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
       "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- processes, followed through /proc ------------------------------------------------------------

def processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, start time, state) of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            out[int(entry.name)] = (int(fields[1]), fields[19], fields[0])  # ppid, starttime, state
    return out


def descendants(roots: set[int], table: dict[int, tuple[int, str, str]]) -> dict[int, str]:
    """The processes below ``roots`` (roots included): pid -> start time, to tell a reused pid."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = table[pid][1]
            todo += children.get(pid, [])
    return found


def alive(seen: dict[int, str]) -> list[int]:
    """Those of ``seen`` still running (the same process: same start time; zombies are done)."""
    table = processes()
    return sorted(pid for pid in descendants(set(seen), table)
                  if table[pid][2] != "Z" and (pid not in seen or seen[pid] == table[pid][1]))


def kill_all(seen: dict[int, str]) -> None:
    """SIGKILL, by PID, every process of ``seen`` (and below) still running."""
    for pid in alive(seen):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Guard:
    """A watchdog process that follows the processes :meth:`watch` names, and every process they
    start, and kills those still running when :meth:`close` is called or this process is gone
    (its stdin, this process's pipe, ends): nothing a test started outlives it. Linux only (/proc);
    elsewhere it does nothing."""

    def __init__(self):
        self.proc = None
        if Path("/proc/self/stat").exists():
            self.proc = subprocess.Popen([sys.executable, __file__, "guard"], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, start_new_session=True)

    def watch(self, pid: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(f"{pid}\n".encode())
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass

    def close(self, timeout: float = 30) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _guard_main() -> None:
    """The :class:`Guard` process: PIDs on stdin, one a line; at its end, the kill."""
    seen: dict[int, str] = {}
    fd = sys.stdin.fileno()
    buffer = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.25)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            table = processes()
            for line in lines:
                if line.strip().isdigit() and int(line) in table:
                    seen[int(line)] = table[int(line)][1]
        if seen:
            table = processes()  # the same process only (a pid reused since is left alone)
            seen.update(descendants({p for p in seen if p in table and table[p][1] == seen[p]}, table))
    for _ in range(2):  # (a process may start another while it is being killed)
        kill_all(seen)
        time.sleep(0.2)


# --- a doc's fixed ports --------------------------------------------------------------------------

def _listening(ports: tuple[int, ...]) -> dict[int, set[str]]:
    """port -> the socket inodes listening on it (TCP, IPv4 and IPv6), from /proc/net."""
    out: dict[int, set[str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            port = int(fields[1].rpartition(":")[2], 16)
            if fields[3] == "0A" and port in ports:  # 0A: LISTEN
                out.setdefault(port, set()).add(fields[9])
    return out


def _sockets(pids) -> dict[str, int]:
    """socket inode -> a process of ``pids`` that holds it."""
    out = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out[link[8:-1]] = pid
    return out


def holders(port: int) -> str:
    """Who listens on ``port``, in words (as far as /proc lets this user see)."""
    inodes = _listening((port,)).get(port, set())
    if not inodes:
        return "nobody now"
    owners = {inode: pid for inode, pid in _sockets(p for p in processes()).items() if inode in inodes}
    named = []
    for pid in sorted(set(owners.values())):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            command = "?"
        named.append(f"pid {pid}: {command[:120]}")
    return "; ".join(named) or "a process this user cannot see"


@contextlib.contextmanager
def holding_ports(ports: tuple[int, ...], wait: float = 1800):
    """Hold ``ports`` for the ``with`` block: a lock file per port set (in the temporary
    directory) makes the tests of this machine that use them — two pytest workers, two CI runs —
    take turns (waiting up to ``wait`` seconds); then ports another program listens on skip the
    test, naming them and who holds them. The lock goes with this process, however it ends."""
    import fcntl

    import pytest

    path = Path(tempfile.gettempdir()) / f"fedpd-ports-{'-'.join(str(p) for p in ports)}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file: locking needs only reading
        fd = os.open(path, os.O_RDONLY)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    holder = path.read_text(errors="replace").strip() or "another process"
                    pytest.skip(f"the doc's ports {list(ports)} stayed held by another test ({holder}; lock "
                                f"{path}) for {wait:g} s")
                time.sleep(1)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()}: {' '.join(sys.argv)[:200]}\n".encode())
        busy = sorted(_listening(ports))
        if busy:
            pytest.skip("the doc's ports are in use on this machine: " + ", ".join(f"{p} ({holders(p)})"
                                                                                 for p in busy))
        yield PortWatch(ports)
    finally:
        os.close(fd)  # (the lock with it)


class PortWatch:
    """Whether a program other than the test's own processes listens on one of ``ports``: asked
    now and then while a deployment runs, a port taken midway (another deployment on the same
    machine) is named at once instead of ending as Flower's 401 errors much later."""

    def __init__(self, ports: tuple[int, ...], every: float = 2.0):
        self.ports, self.every = tuple(ports), every
        self.suspects: set[int] = set()
        self.checked = 0.0

    def taken(self, ours: dict[int, str]) -> dict[int, str]:
        """port -> its holder, for ports another program has held at two checks in a row (a
        process of ours that has just bound one is not yet among ``ours``)."""
        if time.monotonic() - self.checked < self.every:
            return {}
        self.checked = time.monotonic()
        mine = _sockets(alive(ours))
        foreign = {port for port, inodes in _listening(self.ports).items() if not inodes & set(mine)}
        taken = {port: holders(port) for port in sorted(foreign & self.suspects)}
        self.suspects = foreign
        return taken


def run_doc_script(script: str, cwd: Path, env: dict[str, str], log: Path, ports: PortWatch,
                   timeout: float) -> tuple[int, list[int]]:
    """Run ``script`` (a doc's blocks) with ``bash -e`` in a session of its own, following every
    process it starts; after it ends, wait (up to 45 s) for what it stopped to go. (its exit
    status, the processes still running then), and every process it started is gone on return,
    however this ends — a port of ``ports`` that another program takes midway stops it and skips
    the test, naming the port and its holder."""
    import pytest

    guard = Guard()
    seen: dict[int, str] = {}
    taken: dict[int, str] = {}
    proc = None
    try:
        with open(log, "w") as out:
            proc = subprocess.Popen(["bash", "-e", "-c", script], cwd=cwd, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        guard.watch(proc.pid)
        deadline = time.time() + timeout
        while proc.poll() is None and time.time() < deadline:  # every process the script starts, and theirs
            seen.update(descendants({proc.pid, *seen}, processes()))
            taken = ports.taken(seen)
            if taken:
                break
            time.sleep(0.5)
        if not taken:
            for _ in range(45):  # a stopped node's helper notices between reconnection tries (at most 20 s apart)
                if not alive(seen):
                    break
                time.sleep(1)
        left = alive(seen)
    finally:
        kill_all(seen)  # by PID: what this script started and did not stop
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        guard.close()
    if taken:
        pytest.skip("another program took the doc's port midway: " + ", ".join(f"{p} ({who})"
                                                                              for p, who in taken.items()))
    return proc.returncode, left



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


def deployment_env(home: Path) -> dict[str, str]:
    """The clean environment a deployment doc's script runs in: a fresh HOME; on PATH this Python's
    scripts and the system's; PYTHONPATH only this checkout's ``src`` (``fedpd`` is the code under
    test); none of Flower's switches."""
    src = Path(__file__).resolve().parents[1] / "src"
    return {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(home), "PYTHONPATH": str(src), "LANG": "C.UTF-8"}


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
        self.guard = Guard()  # whatever ends the test, nothing started here outlives it
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
        self.track(name, proc)
        return proc

    def track(self, name: str, proc: subprocess.Popen) -> None:
        """Stop ``proc`` (started in a session of its own) with the deployment."""
        self.procs[name] = proc
        self.guard.watch(proc.pid)

    def superlink(self) -> None:
        flags = ([f"--ssl-ca-certfile={self.certs / 'ca.crt'}", f"--ssl-certfile={self.certs / 'server.crt'}",
                  f"--ssl-keyfile={self.certs / 'server.key'}"] if self.tls else ["--insecure"])
        if self.auth:
            flags.append("--enable-supernode-auth")
        self.start(
            "superlink", [str(BIN / "flower-superlink"), *flags, "--host", "127.0.0.1", "--port", str(self.port)]
        )
        try:
            from fedpd.errors import ConfigError
            from fedpd.flower.deploy import wait_for_superlink

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

    def flwr_run(self, appdir: Path, timeout: float = 600,
                 run_config: str | None = None) -> subprocess.CompletedProcess:
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
        for proc in self.procs.values():  # whatever ignored TERM
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self.guard.close()  # and what they started in sessions of their own (Flower's SuperExec helpers)

    def __enter__(self) -> "Deployment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__" and sys.argv[1:] == ["guard"]:
    _guard_main()
