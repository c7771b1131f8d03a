"""A node's exclusive hold on its ``store-dir``: ``<store-dir>/node.lock`` names the node that uses
the folder — the clients it hosts, the transport's node id, the process that serves it (pid, its
start time) and the machine — and no other node may use the folder while that process lives.

Two nodes on one store-dir would read each other's clients as never trained (initial states) and
write their rounds into one folder. So a node takes the lock with its first message and checks it
with every message: a lock naming another live process is refused in one line naming its holder;
one naming a process that is gone (on this machine) is taken over, with a notice; one written on
another machine is refused (its process cannot be checked from here: remove the file once that
node is stopped). The process that holds a SuperNode's lock is the one that lives as long as the
node: the warm ClientApp (``fedpd flower clientapp``), or for a ClientApp process per message, the
SuperNode itself (see :func:`fedpd.flower.clientapp.serving_pid`); the same process with the same
clients is the same node, even under a new node id (a restarted SuperNode served by the same warm
process). Reading and rewriting the lock happens under an exclusive
``flock`` of the store-dir, so two nodes starting at once cannot both take it.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from fedpd.io import atomic_write_text
from fedpd.remote.messages import client_ranges

LOCK = "node.lock"
_TAKEN: set[Path] = set()  # locks this process wrote naming itself (released when a warm process stops)


@dataclass(frozen=True)
class Holder:
    """Who uses a store-dir: ``clients`` (ranges), ``pid`` and its start time, ``host``, ``node`` (id)."""

    clients: str
    pid: int
    host: str
    started: str = ""
    node: str = ""

    def same(self, other: "Holder") -> bool:
        """The same node: the same clients served by the same process (the node id may change)."""
        return (self.clients, self.pid, self.host, self.started) == (other.clients, other.pid, other.host,
                                                                      other.started)

    def describe(self) -> str:
        node = f", node id {self.node}" if self.node else ""
        return f"the node of clients {self.clients} (pid {self.pid} on {self.host}{node})"


def holder(hosted: list[int], node: str = "", pid: int | None = None) -> Holder:
    """This node as a lock names it; ``pid``: the process that serves it (default: this one)."""
    pid = os.getpid() if pid is None else int(pid)
    return Holder(client_ranges(hosted), pid, socket.gethostname(), _start_time(pid), str(node or ""))


def _start_time(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot; "" where /proc cannot say): a pid
    reused by a later process is not the holder."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""


def alive(pid: int, started: str = "") -> bool:
    """Whether process ``pid`` (started at ``started``, when known) runs on this machine; a zombie
    (dead, not yet reaped) does not."""
    stat = Path("/proc") / str(pid) / "stat"
    if Path("/proc/self/stat").exists():
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            return False
        return fields[0] not in ("Z", "X") and (not started or fields[19] == started)
    try:  # no /proc (macOS): a signal 0 says whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: Path) -> Holder | None:
    try:
        about = json.loads(path.read_text())
        return Holder(str(about["clients"]), int(about["pid"]), str(about["host"]), str(about.get("started", "")),
                      str(about.get("node", "")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"store-dir lock {path}: unreadable ({type(err).__name__}); remove it if no node uses "
                         f"this store-dir") from None


def hold(root: str | Path, me: Holder) -> str:
    """Take or keep ``root``'s lock for ``me``. Returns a notice ("" when there is nothing to say:
    the lock was free or already ours); a lock another node holds is a one-line ValueError."""
    root = Path(root)
    path = root / LOCK
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"store-dir {str(root)!r}: {err.strerror or err} (a node needs a directory of its own "
                         f"that it can write)") from None
    fd = _guard(root)
    try:
        held = _read(path)
        if held is not None and held.same(me):
            if held.node != me.node:  # the same node under a new id: the lock says the current one
                _write(path, me)
            return ""
        notice = ""
        if held is not None:
            if held.host != me.host:
                raise ValueError(f"store-dir {str(root)!r} is held by {held.describe()}: this node (clients "
                                 f"{me.clients}) needs a store-dir of its own; once that node is stopped, remove "
                                 f"{path} to move the store-dir here")
            if alive(held.pid, held.started):
                raise ValueError(f"store-dir {str(root)!r} is held by {held.describe()}, which is running: this "
                                 f"node (clients {me.clients}) needs a store-dir of its own")
            notice = f"store-dir {str(root)!r}: took over the lock of {held.describe()}, which is no longer running"
        _write(path, me)
        return notice
    finally:
        if fd >= 0:
            os.close(fd)  # (releases the flock)


def _guard(root: Path) -> int:
    """An exclusive ``flock`` of the directory ``root`` (its descriptor; -1 where there is none:
    Windows, some network file systems — then the lock file alone)."""
    try:
        import fcntl

        fd = os.open(root, os.O_RDONLY)
    except (ImportError, OSError):
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        pass
    return fd


def _write(path: Path, me: Holder) -> None:
    try:
        atomic_write_text(path, json.dumps({**asdict(me), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                 time.gmtime())}) + "\n")
    except OSError as err:
        raise ValueError(f"store-dir {str(path.parent)!r}: cannot write {LOCK} ({err.strerror or err}); a node "
                         f"needs a directory of its own that it can write") from None
    if me.pid == os.getpid():
        _TAKEN.add(path)


def release() -> None:
    """Remove the locks this process holds (a warm ClientApp that stops: its node's store-dir is
    free at once, no notice of a take-over)."""
    for path in sorted(_TAKEN):
        try:
            held = _read(path)
            if held is not None and held.pid == os.getpid() and held.host == socket.gethostname():
                path.unlink()
        except (OSError, ValueError):
            pass
    _TAKEN.clear()
