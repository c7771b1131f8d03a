"""How a run on nodes went, kept in its run directory (``status.json``), and read back
(``fedpd status``).

A deployment's ``flwr run`` returns 0 whatever became of the run — a killed ServerApp, a refused
resume, ``flwr stop`` — and the server's notices (a node's clients dropped out, a node's uploads
rejected, a node gone) are lines in Flower's log. So a run whose clients live on nodes
(``run.engine`` loopback or flower, or a Flower deployment) keeps, beside its metrics::

    {"state": "running" | "finished" | "failed" | "stopped" | "refused",
     "round": rounds done at the last checkpoint or end, "rounds": the target,
     "error": the one line that ended it (failed, stopped, refused),
     "pid", "host": the server's process while it runs (a "running" run whose process is gone
                    was killed: it "died"),
     "resume": how to continue it, in the words of the tool that ran it,
     "started", "updated": UTC times,
     "notices": [{"round": r, "text": "..."}, ...],
     "refused": {"error", "at"}: a later ``flwr run`` on a finished run that was refused (the run
                stays finished)}

written atomically when the run starts, at every notice and checkpoint, and when it ends. A resume
keeps the notices of the rounds up to its checkpoint (the later rounds run again). A refused
``flwr run`` (the ServerApp never started the run) is recorded too, unless the directory's run
is alive (a finished run keeps its state). :func:`read` gives any run directory's state, one
without ``status.json`` (a run in process, or of an older fedpd) from its metrics.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from fedpd.io import atomic_write_text

STATUS = "status.json"
#: ``fedpd status``'s exit status by state: 0 finished, 4 running, 1 anything that ended early
EXIT = {"finished": 0, "running": 4}
ENDED_EARLY = 1


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _load(out: Path) -> dict:
    try:
        record = json.loads((Path(out) / STATUS).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


class StatusFile:
    """The ``status.json`` of a run in progress in ``out``."""

    def __init__(self, out: Path, *, round: int, rounds: int, resume: str, resumed: bool):
        self.out = Path(out)
        kept = _load(self.out).get("notices", []) if resumed else []
        self.record = {"state": "running", "round": round, "rounds": rounds, "error": "", "pid": os.getpid(),
                       "host": socket.gethostname(), "resume": resume, "started": _now(), "updated": "",
                       "notices": [n for n in kept if isinstance(n, dict) and n.get("round", 0) <= round]}
        self._write()

    def _write(self) -> None:
        self.record["updated"] = _now()
        atomic_write_text(self.out / STATUS, json.dumps(self.record, indent=1) + "\n")

    def note(self, round: int, text: str) -> None:
        """A notice of round ``round`` (counted from 1, as the server's lines count; one after the
        last round — the run's end, sending its last commits — is the last round's)."""
        round = min(int(round), int(self.record["rounds"])) if self.record["rounds"] else int(round)
        self.record["notices"].append({"round": round, "text": text})
        self._write()

    def progress(self, round: int) -> None:
        self.record["round"] = int(round)
        self._write()

    def end(self, state: str, round: int, error: str = "") -> None:
        self.record.update(state=state, round=int(round), error=error)
        self._write()


def record_refusal(out: Path, error: str, resume: str = "") -> bool:
    """Say in ``out`` that a run there was refused before it started (``error``), keeping what the
    record said of the directory's run; not when that run is alive. A finished run stays finished
    (a refused resume changes nothing of it; a script's ``fedpd status`` must still say so): the
    refusal is kept beside it (``refused``). Whether it was written."""
    out = Path(out)
    record = _load(out)
    if record.get("pid") == os.getpid() and record.get("host") == socket.gethostname():
        return False  # the run started here: it recorded how it ended
    if record.get("state") == "running" and _alive(record):
        return False
    if record.get("state") == "finished":
        record.update(refused={"error": error, "at": _now()}, updated=_now())
        atomic_write_text(out / STATUS, json.dumps(record, indent=1) + "\n")
        return True
    record.update(state="refused", error=error, updated=_now())
    record.setdefault("notices", [])
    if resume:
        record.setdefault("resume", resume)
    record.pop("pid", None)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / STATUS, json.dumps(record, indent=1) + "\n")
    return True


def _alive(record: dict) -> bool | None:
    """Whether the process of a running record still runs (None: it runs on another machine)."""
    if record.get("host") != socket.gethostname():
        return None
    try:
        pid = int(record.get("pid", 0))
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError, TypeError, OverflowError):
        return False
    except PermissionError:  # someone else's process of that id
        return True
    return pid > 0 and not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits to be reaped (a killed ServerApp until Flower's
    SuperLink reaps it): signal 0 still reaches such a process. Linux's /proc says; elsewhere no."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()  # (the command name, in parentheses, may hold spaces)
    return bool(fields) and fields[0] in ("Z", "X")


def read(out: Path) -> dict:
    """The state of the run in ``out``: its ``status.json`` with ``state`` "died" for a running
    record whose process is gone (or a zombie, not yet reaped); without one, "finished" or
    "stopped" from its metrics."""
    from fedpd.io import load_toml, read_jsonl

    out = Path(out)
    record = _load(out)
    last = None
    if (out / "metrics.jsonl").exists():  # (the file names of fedpd.runner, which writes this module's)
        records = read_jsonl(out / "metrics.jsonl")
        last = records[-1].get("round") if records else None
    if record.get("state") in ("running", "finished", "failed", "stopped", "refused"):
        if last is not None and record.get("state") == "running":
            record["round"] = max(int(record.get("round", 0)), int(last))
        if record.get("state") == "running":
            alive = _alive(record)
            if alive is False:
                record["state"] = "died"
            elif alive is None:
                record["elsewhere"] = True
        return record
    if not (out / "config.toml").exists():
        return {}
    rounds = load_toml(out / "config.toml").get("run", {}).get("rounds")
    state = "finished" if last == rounds else "stopped"
    return {"state": state, "round": last or 0, "rounds": rounds, "notices": [], "unrecorded": True,
            "resume": f"fedpd run --resume {out}"}


def describe(out: Path, record: dict) -> str:
    """One line: where the run is and how it got there."""
    state, done, target = record["state"], record.get("round", 0), record.get("rounds", "?")
    where = f"round {done} of {target}"
    notes = len(record.get("notices", []))
    more = f"; {notes} notice{'s' * (notes != 1)}" if notes else ""
    if state == "finished":
        refused = record.get("refused")
        later = (f"; a later flwr run on it was refused: {refused.get('error', '')}"
                 if isinstance(refused, dict) else "")
        return f"{out}: finished {where}{more}{later}"
    if state == "running":
        host = f" on {record.get('host')}" if record.get("elsewhere") else ""
        return f"{out}: running, {where} (server process {record.get('pid')}{host}){more}"
    again = f"; continue it with {record['resume']}" if record.get("resume") else ""
    if state == "died":
        return (f"{out}: died at {where} (its server process {record.get('pid')} is gone: killed?){more}; the "
                f"last checkpoint is intact{again}")
    if state == "refused":
        return f"{out}: refused: {record.get('error', '')}{more}"
    why = f": {record['error']}" if record.get("error") else ""
    unrecorded = " (no status.json: judged from its metrics)" if record.get("unrecorded") else ""
    return f"{out}: {state} at {where}{why}{more}{unrecorded}{again}"


def exit_code(state: str) -> int:
    return EXIT.get(state, ENDED_EARLY)
