"""Parallel clients inside one run (``run.workers``): a round's participants trained on worker
processes of this machine.

The run's process keeps everything that makes a run a run: the client store (memory or disk), the
server, the commit of a round (``receive``) and the checkpoints, so exact resume is unchanged.
The workers are stateless between rounds: each builds the problem, the algorithm and the local
solver once from the run's config TOML (:func:`fedpd.build.from_toml`, as a remote node does —
each worker holds its own copy of the data), and for every round gets (message, a group of client
ids, their states, the round) and returns (uploads, new states, sample gradients computed),
running the very chunks of ``local`` the in-process engine runs
(:func:`fedpd.engine.train_in_chunks`). A client's computation depends only on itself (its data,
state and id-keyed streams), so how the participants are grouped changes no result.

A worker is forked from this run's *zygote*: a fresh interpreter (``python -c "from fedpd.workers
import zygote; zygote(FD)"``) started once per run process, which imports torch and fedpd and then
only forks, one worker per request (its threads set then, its environment the run's at that
moment). A worker thus costs a fork, not an interpreter start and torch's import (about 2 s of CPU
each, most of a small run's worker time). The run's process itself is never forked: fork is unsafe
once torch has started its OpenMP threads, and the zygote never computes (it runs with one OpenMP
and BLAS thread, so it holds no thread pool to lose in a fork); nor does multiprocessing's spawn or
forkserver re-import the caller's ``__main__`` here. Each worker is joined to the run's process by a
socket pair that :class:`multiprocessing.connection.Connection` carries pickled messages over (numpy
arrays, never torch's shared-memory tensors). It ignores Ctrl-C (the run's process stops it) and
exits when the run's process closes its end, or dies; the zygote exits when the run's process does,
and reaps the workers it forked (their exit status comes back on request).

Failures, never a hang: a worker that dies (killed, out of memory) is noticed at once (its
socket closes), started again and its group trained again, with one line on stderr; a second
death in the same round, a worker that cannot build the run, and one that has not answered
within ``run.node_timeout`` seconds stop the run with one line (the last checkpoint is intact).
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from multiprocessing.connection import Connection, wait
from pathlib import Path

import numpy as np
import torch

from fedpd.errors import ConfigError, FedpdError
from fedpd.threads import ENV_VARS, LocalWork, available_cores, use_threads

#: ``run.workers = "auto"``: below this many floating-point operations of local work per round
#: (:attr:`fedpd.threads.LocalWork.round_flops`) one process trains the round; above it, one worker per
#: usable core. Measured with benchmarks/parallel_clients.py --break-even (docs/performance.md).
PARALLEL_ROUND_FLOPS = 2e10

State = dict[str, torch.Tensor]


def notice(message: str) -> None:
    print(f"fedpd: {message}", file=sys.stderr, flush=True)


def run_cores() -> int:
    """This run's share of the cores: ``OMP_NUM_THREADS`` (or ``MKL_NUM_THREADS``) when the
    environment sets it (``fedpd sweep`` gives each of its runs 1), else the usable cores."""
    env = next((os.environ[v] for v in ENV_VARS if os.environ.get(v, "").strip().isdigit()), "")
    return int(env) if env and int(env) > 0 else available_cores()


def plan_workers(asked: int | str, threads: int, work: LocalWork, device: torch.device) -> tuple[int, int]:
    """(worker processes, torch threads in each) for ``run.workers`` (``asked``) and ``run.threads``
    (``threads``), a round's local ``work`` and the run's ``device``; 1 worker: the run's own process
    trains the clients. At most one worker per participant of a round, and workers × threads ≤ the
    usable cores."""
    usable = available_cores()
    cores = min(run_cores(), usable)
    if asked == "auto":
        large = device.type == "cpu" and work.round_flops >= PARALLEL_ROUND_FLOPS
        wanted = cores if large else 1
    else:
        if asked > 1 and device.type != "cpu":
            raise ConfigError(f"run.workers: {asked} worker processes train on the CPU, and run.device is "
                              f"{device.type!r} (allowed: 1 or \"auto\" with a GPU)")
        if asked > usable:
            notice(f"run.workers: {asked} is more than the {usable} usable cores of this machine; using {usable}")
        wanted = min(asked, usable)
    workers = max(1, min(wanted, work.participants))
    if workers == 1:
        return 1, 0
    share = max(1, cores // workers)
    return workers, min(threads or share, share)


def _arrays(state: State) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in state.items()}


def _tensors(arrays: dict[str, np.ndarray]) -> State:
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


def _describe(err: BaseException) -> str:
    frame = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    where = f" ({Path(frame.filename).name}:{frame.lineno})" if frame else ""
    return f"{type(err).__name__}: {err}{where}"[:500]


def _end(process, grace: float) -> None:
    """Wait ``grace`` seconds for ``process`` (a Popen or a :class:`_Forked`) to exit, then kill it."""
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class _Forked:
    """A worker forked by the zygote, with the part of :class:`subprocess.Popen` that the pool uses
    (it is the zygote's child, so its exit status comes from the zygote)."""

    def __init__(self, zygote: "_Zygote", pid: int):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            status = self.zygote.wait(self.pid, 3600.0 if timeout is None else timeout)
            if status is None:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            self.returncode = status
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class _Zygote:
    """The run process's zygote (see the module's docstring): started at the first worker, kept
    for the life of the process, started again if it has died."""

    _current: "_Zygote | None" = None
    _lock = threading.Lock()  # one request and its reply at a time, whichever thread starts a pool

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # one message per request
        env = {**os.environ, **{v: "1" for v in (*ENV_VARS, "OPENBLAS_NUM_THREADS")}}
        fd = theirs.detach()
        try:
            self.process = subprocess.Popen([sys.executable, "-c", f"from fedpd.workers import zygote; zygote({fd})"],
                                            pass_fds=[fd], stdin=subprocess.DEVNULL, env=env)
        finally:
            os.close(fd)
        self.socket, self.owner = ours, os.getpid()
        weakref.finalize(self, _Zygote._stop, self.socket, self.process)

    @staticmethod
    def _stop(sock: socket.socket, process: subprocess.Popen) -> None:
        sock.close()  # the zygote sees it and exits
        _end(process, 5.0)

    def _ask(self, request: tuple, fds: list[int] = ()):
        with self._lock:
            if fds:
                socket.send_fds(self.socket, [pickle.dumps(request)], list(fds))
            else:
                self.socket.send(pickle.dumps(request))
            reply = self.socket.recv(1 << 16)
        if not reply:
            raise OSError("the worker zygote exited")
        return pickle.loads(reply)

    @classmethod
    def fork(cls, fd: int, env: dict) -> _Forked:
        """A worker serving the socket ``fd`` (duplicated into it), with environment ``env``."""
        for attempt in (0, 1):
            with cls._lock:
                zygote = cls._current
                if zygote is None or zygote.owner != os.getpid() or zygote.process.poll() is not None:
                    zygote = cls._current = cls()
            try:
                return _Forked(zygote, zygote._ask(("fork", env), [fd]))
            except OSError:
                cls._current = None  # died (killed, out of memory): start another one, once
                if attempt:
                    raise FedpdError("the worker zygote (run.workers) exited; the run stops") from None

    def wait(self, pid: int, timeout: float) -> int | None:
        """Worker ``pid``'s exit code (Popen's convention), or None if it is still running after
        ``timeout`` seconds; -SIGKILL if the zygote is gone (it took its workers' statuses)."""
        try:
            return self._ask(("wait", pid, timeout))
        except OSError:
            return -signal.SIGKILL


class _Worker:
    """One worker process and the run's end of its socket."""

    def __init__(self, config_toml: str, threads: int):
        ours, theirs = socket.socketpair()
        env = {**os.environ, **{v: str(threads) for v in ENV_VARS}}
        fd = theirs.detach()
        try:
            self.process = _Zygote.fork(fd, env)
        finally:
            os.close(fd)
        self.conn = Connection(ours.detach())
        self.ready = False
        self.send(("start", config_toml, threads, list(sys.path)))  # small: fits the socket's buffer

    def send(self, obj) -> bool:
        """False if the worker is gone."""
        try:
            self.conn.send(obj)
            return True
        except OSError:
            return False

    def recv(self):
        """The worker's next reply; None if it is gone."""
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def stop(self, grace: float = 5.0) -> None:
        self.send(None)
        self.conn.close()
        _end(self.process, grace)


def _stop_all(workers: list[_Worker], grace: float = 5.0) -> None:
    for w in workers:
        w.stop(grace)


class WorkerPool:
    """``size`` worker processes with ``threads`` torch threads each, training groups of clients
    of the run whose resolved config is ``config_toml``; ``timeout``: seconds to wait for a
    reply. Started when created (the workers build while the run's process evaluates round 0),
    stopped by :meth:`close` (also when garbage-collected or at exit); a closed pool starts again
    on its next :meth:`train`."""

    def __init__(self, config_toml: str, size: int, threads: int, timeout: float):
        self.config_toml, self.size, self.threads, self.timeout = config_toml, size, threads, timeout
        self.workers: list[_Worker] = []
        self._finalizer = None
        self._start()

    def _start(self) -> None:
        self.workers = [_Worker(self.config_toml, self.threads) for _ in range(self.size)]
        self._finalizer = weakref.finalize(self, _stop_all, self.workers)

    def close(self, grace: float = 5.0) -> None:
        """Stop the workers: each finishes what it is doing within ``grace`` seconds, or is killed."""
        if self._finalizer is not None and self._finalizer.detach() is not None:
            _stop_all(self.workers, grace)
        self.workers, self._finalizer = [], None

    def _await_ready(self, indices, round: int) -> None:
        """Wait until workers ``indices`` have built the run (each within the timeout)."""
        waiting = {self.workers[i].conn: i for i in indices if not self.workers[i].ready}
        deadline = time.monotonic() + self.timeout
        while waiting:
            ready = wait(list(waiting), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                raise FedpdError(f"a worker process (run.workers) did not start within {self.timeout:g} s "
                                 f"(run.node_timeout) before round {round}; the run stops")
            for conn in ready:
                i = waiting.pop(conn)
                reply = self.workers[i].recv()
                if reply is None or reply[0] != "ready":
                    why = reply[1] if reply else f"it exited with status {self.workers[i].process.wait()}"
                    raise FedpdError(f"a worker process (run.workers) could not build the run: {why}")
                self.workers[i].ready = True

    def train(self, message: State, groups: list[tuple[torch.Tensor, State]],
              round: int) -> list[tuple[State, State, int]]:
        """Every group of (ids, their states) trained on whichever worker is free next: its
        (uploads, new states, sample gradients computed), in the order of ``groups``. Any failure,
        Ctrl-C included, kills the workers at once (a later round starts them again)."""
        if not self.workers:
            self._start()
        try:
            return self._train(message, groups, round)
        except BaseException:
            self.close(grace=0)
            raise

    def _train(self, message: State, groups: list[tuple[torch.Tensor, State]], round: int):
        self._await_ready(range(self.size), round)
        message_arrays = _arrays(message)
        todo = deque(range(len(groups)))
        results: list = [None] * len(groups)
        redone: set[int] = set()  # groups whose worker died: trained again, once
        has_message: set[int] = set()  # workers holding this round's message
        busy: dict[Connection, tuple[int, int, float]] = {}  # -> (worker, group, deadline)
        idle = list(range(self.size))

        def dispatch(w: int) -> None:
            g = todo.popleft()
            ids, states = groups[g]
            while not self.workers[w].send(("train", round, ids.numpy(), _arrays(states),
                                            None if w in has_message else message_arrays)):
                self._restart(w, g, round, redone, has_message)  # gone since it became ready
            has_message.add(w)
            busy[self.workers[w].conn] = (w, g, time.monotonic() + self.timeout)

        while todo or busy:
            while todo and idle:
                dispatch(idle.pop())
            ready = wait(list(busy), timeout=max(0.0, min(d for _, _, d in busy.values()) - time.monotonic()))
            if not ready:
                raise FedpdError(f"a worker process (run.workers) has not answered in {self.timeout:g} s in round "
                                 f"{round}; the run stops (its last checkpoint is intact: --resume continues it; raise "
                                 f"run.node_timeout if its rounds are that long)")
            for conn in ready:
                w, g, _ = busy.pop(conn)
                reply = self.workers[w].recv()
                if reply is None:  # died: the group's states are here, untouched; train it again
                    self._restart(w, g, round, redone, has_message)
                    todo.appendleft(g)
                elif reply[0] == "error":
                    raise FedpdError(f"a worker process (run.workers) failed in round {round}: {reply[1]}")
                else:
                    _, uploads, states, sample_grads = reply
                    results[g] = (_tensors(uploads), _tensors(states), sample_grads)
                idle.append(w)
        return results

    def _restart(self, w: int, group: int, round: int, redone: set[int], has_message: set[int]) -> None:
        self.workers[w].stop()
        status = self.workers[w].process.returncode
        if group in redone:
            raise FedpdError(f"a worker process (run.workers) died twice in round {round} (exit status {status}); "
                             f"the run stops (its last checkpoint is intact: --resume continues it)")
        redone.add(group)
        has_message.discard(w)
        notice(f"a worker process died in round {round} (exit status {status}); starting it again and training "
               f"its clients again")
        self.workers[w] = _Worker(self.config_toml, self.threads)  # in the list the finalizer stops
        self._await_ready([w], round)


# --- the worker's side ------------------------------------------------------------------------
def _train_group(pieces, chunk, task, message: State) -> tuple:
    from fedpd.engine import train_in_chunks

    cfg, problem, algorithm, solver = pieces
    _, round, ids, states, _ = task
    ids, states = torch.from_numpy(ids), _tensors(states)
    before = int(problem.sample_grads)
    trained = list(train_in_chunks(algorithm, problem, solver, cfg.run.seed, chunk, message, ids,
                                   lambda a, b: {k: v[a:b] for k, v in states.items()}, round))
    uploads = {k: torch.cat([up[k] for _, up, _, _ in trained]) for k in trained[0][1]}
    new = {k: torch.cat([s[k] for _, _, s, _ in trained]) for k in trained[0][2]}
    return "done", _arrays(uploads), _arrays(new), int(problem.sample_grads) - before


def serve(fd: int) -> None:
    """A worker's life: build the run from the first message, then train each group it is sent
    until the run's process sends None or goes away."""
    from fedpd.build import client_chunk, from_toml

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the run's process, which stops us
    conn = Connection(fd)
    try:
        _, config_toml, threads, path = conn.recv()
        sys.path[:] = path  # what the run's process imports from (a plug-in's module, too)
        use_threads(threads)
        try:
            pieces = from_toml(config_toml)
            chunk = client_chunk(pieces[0].run.client_chunk, pieces[1])
        except Exception as err:
            conn.send(("error", _describe(err)))
            return
        conn.send(("ready",))
        message: State = {}
        while (task := conn.recv()) is not None:
            if task[4] is not None:  # a round's first group for this worker carries the message
                message = _tensors(task[4])
            try:
                conn.send(_train_group(pieces, chunk, task, message))
            except Exception as err:
                conn.send(("error", _describe(err)))
    except (EOFError, OSError):  # the run's process is gone
        return


def zygote(fd: int) -> None:
    """The zygote's life: import what a worker needs, then fork one worker per request of the run's
    process (and report their exit statuses) until the run's process goes away."""
    from fedpd import build, engine  # what serve builds and trains with: imported once, here

    del build, engine

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = socket.socket(fileno=fd)
    exited: dict[int, int] = {}  # pid -> exit code, for workers reaped before anyone asked

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            exited[pid] = os.waitstatus_to_exitcode(status)

    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1 << 20, 1)
        except OSError:
            return
        if not data:
            return  # the run's process closed its end, or died
        request = pickle.loads(data)
        reap()
        if request[0] == "fork":
            pid = os.fork()
            if pid == 0:  # the worker
                control.close()
                os.environ.clear()
                os.environ.update(request[1])
                code = 1
                try:
                    serve(fds[0])
                    code = 0
                except BaseException:
                    traceback.print_exc()  # as an interpreter would, before its exit status 1
                finally:
                    os._exit(code)
            os.close(fds[0])
            reply = pid
        else:  # ("wait", pid, timeout)
            _, pid, timeout = request
            deadline = time.monotonic() + timeout
            while pid not in exited and time.monotonic() < deadline:
                time.sleep(0.01)
                reap()
            reply = exited.pop(pid, None)
        control.send(pickle.dumps(reply))
