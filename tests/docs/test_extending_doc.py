"""docs/extending.md, run as written: its files are written into an empty directory
outside the repository and every bash block runs there, verbatim, in a clean environment (a
fresh HOME; on PATH only this Python's scripts and the system's; PYTHONPATH only this checkout's
``src``, so that ``fedpd`` is the code under test — the installed one in CI). Each block runs in
a session of its own, which is stopped when the block ends, so a deployment's SuperLink and
SuperNodes are left running nowhere."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from doc_blocks import bash_blocks
from helpers import ROOT

DOC = (ROOT / "docs" / "extending.md").read_text()
PERSONALISED = "5. A personalised method"  # its commands run in process: a few seconds, no Flower


def files() -> dict[str, str]:
    """The files the page shows: code blocks whose first line is a comment naming the file."""
    out = {}
    for language, body in re.findall(r"```(python|toml)\n(.*?)```", DOC, re.S):
        first = body.splitlines()[0]
        named = re.match(r"# ([\w.]+\.(?:py|toml))\b", first)
        if named:
            out[named.group(1)] = body
    return out


def blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC, re.S)


def clean_env(home: Path) -> dict[str, str]:
    return {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(home), "PYTHONPATH": str(ROOT / "src"), "LANG": "C.UTF-8", "COLUMNS": "120",
            "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def run_block(block: str, cwd: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    """``block`` as one bash script (stopping at the first failing command) in a session of its own;
    whatever it left running is stopped afterwards (TERM, then KILL, of the session's group)."""
    proc = subprocess.Popen(["bash", "-e", "-c", block], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            if sig == signal.SIGTERM:  # up to 3 s for the group to stop
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline and group_alive(proc):
                    time.sleep(0.1)
        proc.wait()
    return subprocess.CompletedProcess(block, proc.returncode, out, "")


def group_alive(proc: subprocess.Popen) -> bool:
    """Whether a process of ``proc``'s group runs (``proc`` itself reaped once it ended: a zombie
    leader would count, and its group id is not reused while a member lives)."""
    proc.poll()
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


def in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_page_shows_one_file_a_config_and_the_commands():
    assert set(files()) == {"my_fedpd.py", "my_experiment.toml", "damped_feddyn.py", "my_fedrep.py"}
    text = "\n".join(blocks())
    for needle in ("fedpd run my_experiment.toml", "fedpd compare", "run.engine=flower", "allowed-plugins='my_fedpd'",
                   "flwr run"):
        assert needle in text, needle
    assert "docs/extending.md" in (ROOT / "README.md").read_text()


@pytest.mark.slow  # Flower's simulation and a deployment
def test_the_worked_example_runs_as_written_outside_the_repository(tmp_path, monkeypatch):
    ports = sorted({int(p) for p in re.findall(r"--port (\d+)", "\n".join(blocks()))})
    busy = [port for port in ports if in_use(port)]
    if busy:  # another checkout's run of this page, say: its flwr run would reach that SuperLink
        pytest.skip(f"the page's ports {busy} are in use on this machine")
    project = tmp_path / "my_project"
    project.mkdir()
    for name, body in files().items():
        (project / name).write_text(body)
    env = clean_env(tmp_path / "home")
    for block in blocks():
        if block in bash_blocks(ROOT / "docs" / "extending.md", PERSONALISED):
            continue  # run by the test below, in process
        done = run_block(block, project, env)
        assert done.returncode == 0, f"{block}\n---\n{done.stdout[-4000:]}"
    runs = project / "runs"
    fedexp, fedavg = metrics(runs / "fedexp"), metrics(runs / "fedavg")
    assert fedexp[-1]["round"] == 30 and "server_step" in fedexp[-1] and "server_step" not in fedavg[-1]
    assert metrics(runs / "fedexp-flower") == fedexp  # Flower's simulation: the same numbers
    monkeypatch.chdir(project)  # the deployment writes what the same round writes in process
    import fedpd

    in_process = [{k: v for k, v in r.items() if k != "wall_s"}
                  for r in fedpd.run(project / "my_experiment.toml", overrides=["run.rounds=1"]).history]
    assert metrics(runs / "deployed") == in_process and in_process[-1]["round"] == 1
    assert json.loads((runs / "fedexp" / "plugins.json").read_text())["modules"]["my_fedpd"]["sha256"]


def test_the_personalised_section_runs_as_written(tmp_path, monkeypatch, capsys):
    """Step 5's commands, each as written, through fedpd's command line in this process (from the
    project's directory, the page's files in it): FedRep's personal models beat FedAvg's on the
    writers' own test data, and only the body is uploaded."""
    import shlex

    from fedpd.cli import main
    from fedpd.flat import FlatModel

    project = tmp_path / "my_project"
    project.mkdir()
    for name, body in files().items():
        (project / name).write_text(body)
    monkeypatch.chdir(project)
    before = set(sys.modules)
    try:
        commands = [line for block in bash_blocks(ROOT / "docs" / "extending.md", PERSONALISED)
                    for line in block.splitlines() if line.strip()]
        assert len(commands) == 3
        for line in commands:
            argv = shlex.split(line)
            assert argv[0] == "fedpd" and main(argv[1:]) == 0, line
        table = capsys.readouterr().out
        head = FlatModel(sys.modules["my_fedpd"].TinyCNN((1, 12, 12), 4, width=8)).mask("head")
        import fedpd  # the page: the same metrics in process and on loopback nodes (other groups of clients)

        def two_rounds(*more):
            history = fedpd.run("my_experiment.toml", overrides=["algorithm.name=my_fedrep:FedRep", "run.rounds=2",
                                                                 "run.eval_every=1", *more]).history
            return [{k: v for k, v in r.items() if k != "wall_s"} for r in history]

        assert two_rounds() == two_rounds("run.engine=loopback", "run.nodes=3")
    finally:
        for name in set(sys.modules) - before:
            if name.startswith("my_"):
                del sys.modules[name]
    fedrep, fedavg = metrics(project / "runs" / "fedrep"), metrics(project / "runs" / "fedavg-5")
    assert fedrep[-1]["round"] == fedavg[-1]["round"] == 5
    assert fedrep[-1]["personal_acc"] > fedavg[-1]["personal_acc"]
    assert fedrep[-1]["uplink_floats"] == 5 * 6 * int((~head).sum())  # rounds x participants x the body
    assert (int((~head).sum()), head.numel()) == (96, 1252)  # as the page says
    assert "| fedrep |" in table and "personal_acc_final" in table
