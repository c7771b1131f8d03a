"""What an operator of a deployment meets, on loopback nodes in this process (the
remote engine's reference; the same node code as a SuperNode's): a round's commit riding with the
node's next message (one exchange a round, as a deployment's FlowerTransport asks) gives the
in-process metrics, across a resume from a checkpoint that holds commits not yet made; a node the
transport lists no longer is not waited for — one line at once, its clients drop out, and it is
welcomed back; the run directory's status.json says how the run went and its notices, and
``fedpd status`` reads it with an exit status; a refusal inside the Flower ServerApp is one line
with the run config's flags; a deployment resume takes the options a resume may change from the
app's config; the warm ClientApp serves on past a task whose message never comes."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
import torch

import fedpd
from fedpd import advice
from fedpd.cli import main
from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.remote.engine import LoopbackTransport
from fedpd.remote.node import NodeRuntime
from fedpd.status import STATUS, record_refusal

from helpers import ROOT

CFG = {"problem": {"name": "least_squares", "clients": 6, "dim": 3, "samples_per_client": 8},
       "algorithm": {"name": "feddyn", "eta": 2.0},
       "solver": {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4},
       "sampler": {"name": "uniform", "clients_per_round": 4},
       "run": {"rounds": 5, "eval_every": 1, "seed": 4, "checkpoint_every": 1}}


def records(history) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in history]


class Counting(LoopbackTransport):
    """Loopback nodes that count the kinds of messages they get, and carry commits as a deployment."""

    def __init__(self, root: Path, defer: bool = True):
        super().__init__({k: NodeRuntime(h, root / f"node{k}", durable=False) for k, h in enumerate(([0, 1, 2],
                                                                                                     [3, 4, 5]))},
                         defer_commits=defer)
        self.kinds: list[str] = []
        self.carried: list[str] = []  # the kinds of the messages a commit rode with

    def push(self, node, request):
        self.kinds.append(request.kind)
        if "commit-round" in request.config:
            self.carried.append(request.kind)
        return super().push(node, request)


@pytest.mark.parametrize("algorithm", ["feddyn", "fedpd"])  # FedPD's model is its clients' mean: states queries
def test_commits_that_ride_with_the_next_message_give_the_in_process_metrics(tmp_path, algorithm):
    cfg = {**CFG, "algorithm": {"name": algorithm, "eta": 2.0}}
    if algorithm == "fedpd":
        cfg["sampler"] = {"name": "all"}
    reference = records(fedpd.run(cfg).history)
    nodes = Counting(tmp_path / "nodes")
    result = fedpd.run(cfg, tmp_path / "run", transport=nodes)
    assert records(result.history) == reference
    # one exchange a round: no commit of its own but the run's last (finish)
    assert nodes.kinds.count("commit") <= 2 and nodes.kinds.count("train") >= 5 and len(nodes.carried) >= 3


def test_a_checkpoint_with_commits_still_to_make_resumes_exactly(tmp_path, monkeypatch):
    """Killed after round 3's checkpoint, before the commits it holds reached the nodes: the
    resume's restore carries them, and the metrics are the uninterrupted run's."""
    from fedpd.remote.engine import RemoteEngine

    reference = records(fedpd.run(CFG).history)
    cut = {**CFG, "run": {**CFG["run"], "rounds": 3}}
    finish = RemoteEngine.finish
    monkeypatch.setattr(RemoteEngine, "finish", lambda self: None)  # as if killed after the last checkpoint
    fedpd.run(cut, tmp_path / "run", transport=Counting(tmp_path / "nodes"))
    sd = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert sd["engine"]["pending"], "the checkpoint holds commits not yet made"
    monkeypatch.setattr(RemoteEngine, "finish", finish)
    nodes = Counting(tmp_path / "nodes")
    resumed = fedpd.run(resume=tmp_path / "run", overrides=["run.rounds=5"], transport=nodes)
    assert records(resumed.history) == reference
    assert "restore" in nodes.carried  # the resume's restore carried them


def test_a_node_that_is_gone_is_not_waited_for_and_is_welcomed_back(tmp_path, capsys):
    """The node of clients 3-5 leaves the node list after round 1 (as Flower lists a SuperNode that
    left as offline): the next rounds do not wait run.node_timeout (600 s) for it, one line says so
    once, its clients count as dropped out, status.json records it; listed again, it trains again
    and its commit still pending from round 1 is made first."""
    from fedpd.simulation import Simulation

    nodes = Counting(tmp_path / "nodes")
    sim = Simulation(load_config(CFG), workdir=tmp_path, transport=nodes)
    sim.step()
    away = nodes.runtimes.pop(1)  # not listed, not reachable
    start, dropouts = time.monotonic(), 0
    for _ in range(2):
        sim.step()
    assert time.monotonic() - start < 30  # not run.node_timeout
    assert sim.comm.dropouts > 0
    err = capsys.readouterr().err
    assert err.count("is gone") == 1 and "the node of clients 3-5 (node id 1) is gone" in err, err
    assert "hosted-clients='3-5'" in err and "no reply to train" not in err  # once, with what to do
    waiting = {k: a for k, (r, a) in sim.engine.pending.items() if min(k) >= 3}
    assert waiting and all(sim.engine.pending[k][0] == 0 for k in waiting)  # its round-1 commit waits for it
    nodes.runtimes[1] = away
    dropouts = sim.comm.dropouts

    def trained_again():
        return any(min(k) >= 3 and r > 0 for k, (r, _) in sim.engine.pending.items())

    while not trained_again() and sim.round < 12:
        sim.step()
    assert "the node of clients 3-5 is back" in capsys.readouterr().err
    assert sim.comm.dropouts == dropouts and trained_again()
    assert not any(min(k) >= 3 and r == 0 for k, (r, _) in sim.engine.pending.items())  # made on its return
    kept = {int(p.parent.name[1:]) for p in (tmp_path / "nodes" / "node1").glob("runs/*/c*/v1.pt")}
    assert kept == {i for ids in waiting.values() for i in ids}


def test_status_records_how_a_run_on_nodes_went_and_fedpd_status_says_it(tmp_path, capsys):
    run = tmp_path / "run"
    fedpd.run(CFG, run, transport=Counting(tmp_path / "nodes"))
    record = json.loads((run / STATUS).read_text())
    assert (record["state"], record["round"], record["rounds"], record["notices"]) == ("finished", 5, 5, [])
    assert main(["status", str(run)]) == 0
    assert capsys.readouterr().out.strip() == f"{run}: finished round 5 of 5"
    # a run whose server process is gone (kill -9) is "died", with how to continue it; exit status 1
    record.update(state="running", round=3, pid=_dead_pid())
    (run / STATUS).write_text(json.dumps(record))
    assert main(["status", str(run)]) == 1
    said = capsys.readouterr().out
    assert "died at round 5 of 5" in said and f"fedpd run --resume {run}" in said  # (its metrics reached round 5)
    # a refused flwr run is recorded, keeping what the record said of the run; a live run is left alone
    assert record_refusal(run, "the app's config differs") and main(["status", str(run), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)[0]["state"] == "refused"
    record.update(state="running", pid=os.getppid())
    (run / STATUS).write_text(json.dumps(record))
    assert not record_refusal(run, "another") and main(["status", str(run)]) == 4


def test_an_in_process_run_has_no_status_file_and_fedpd_status_judges_it_from_its_metrics(tmp_path, capsys):
    fedpd.run({**CFG, "run": {**CFG["run"], "rounds": 2}}, tmp_path / "run")
    assert not (tmp_path / "run" / STATUS).exists()
    assert main(["status", str(tmp_path / "run")]) == 0
    assert main(["status", str(tmp_path / "nothing")]) == 2
    assert "not a fedpd run directory" in capsys.readouterr().err


def test_a_run_that_fails_on_nodes_records_the_line_that_ended_it(tmp_path):
    nodes = Counting(tmp_path / "nodes", defer=False)
    sim_nodes = nodes.runtimes
    calls = []

    def commit_fails(request):  # the commit is a must-succeed request: the run stops
        calls.append(request)
        raise RuntimeError("disk full")

    sim_nodes[0]._commit = commit_fails
    with pytest.raises(ConfigError, match="commit failed"):
        fedpd.run(CFG, tmp_path / "run", transport=nodes)
    record = json.loads((tmp_path / "run" / STATUS).read_text())
    assert record["state"] == "failed" and "disk full" in record["error"] and record["round"] == 0


def test_a_run_told_to_stop_records_it(tmp_path, capsys):
    """flwr stop makes Flower exit the ServerApp's process (SystemExit in its main thread)."""
    nodes = Counting(tmp_path / "nodes")
    push = nodes.push

    def stopping(node, request):
        if request.kind == "train" and request.config["round"] == 2:
            raise SystemExit(0)
        return push(node, request)

    nodes.push = stopping
    with pytest.raises(SystemExit):
        fedpd.run(CFG, tmp_path / "run", transport=nodes)
    record = json.loads((tmp_path / "run" / STATUS).read_text())
    assert (record["state"], record["round"]) == ("stopped", 2) and "flwr stop" in record["error"]
    assert main(["status", str(tmp_path / "run")]) == 1
    assert "stopped at round 2 of 5: told to stop" in capsys.readouterr().out


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# --- the Flower ServerApp -----------------------------------------------------------------------

def test_refusals_name_the_flags_of_the_tool_that_was_run(tmp_path):
    out = tmp_path / "run"
    fedpd.run({**CFG, "run": {**CFG["run"], "rounds": 1}}, out)
    with pytest.raises(ConfigError) as cli:
        fedpd.run(CFG, out)
    with advice.flower_app(), pytest.raises(ConfigError) as app:
        fedpd.run(CFG, out)
    assert f"--resume {out}" in str(cli.value) and "--overwrite" in str(cli.value)
    assert '--run-config "resume=true"' in str(app.value) and '--run-config "overwrite=true"' in str(app.value)
    assert "--resume" not in str(app.value) and "--overwrite" not in str(app.value) and "Python" not in str(app.value)


def test_the_serverapp_refuses_in_one_line_and_records_it(tmp_path, monkeypatch, capsys):
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    from flwr.app import Context, RecordDict

    from fedpd.flower import serverapp

    out = tmp_path / "run"
    fedpd.run({**CFG, "run": {**CFG["run"], "rounds": 1}}, out)
    monkeypatch.setattr(serverapp, "FlowerTransport", lambda grid, deployed: Counting(tmp_path / "nodes"))
    ended = []

    def fail(message):  # (Flower's exit, without leaving the test)
        ended.append(message)
        raise SystemExit(1)

    monkeypatch.setattr(serverapp, "_fail", fail)
    cfg = load_config(CFG).to_toml()
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                      run_config={"fedpd-config": cfg, "out": str(out), "resume": False, "overwrite": False})
    with pytest.raises(SystemExit):
        serverapp._main(None, context)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fedpd: error: run directory"), err
    assert '--run-config "resume=true"' in err and ended
    assert json.loads((out / STATUS).read_text())["state"] == "refused"


def test_a_deployment_resume_takes_what_a_resume_may_change_from_the_apps_config(tmp_path):
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    from fedpd.flower.serverapp import resume_overrides

    out = tmp_path / "run"
    fedpd.run({**CFG, "run": {**CFG["run"], "rounds": 2}}, out)
    changed = load_config({**CFG, "run": {**CFG["run"], "rounds": 4, "node_timeout": 30}}).to_toml()
    assert sorted(resume_overrides(changed, out)) == ["run.node_timeout=30.0", "run.rounds=4"]
    assert resume_overrides(load_config({**CFG, "run": {**CFG["run"], "rounds": 2}}).to_toml(), out) == []
    other = load_config({**CFG, "algorithm": {"name": "feddyn", "eta": 3.0}}).to_toml()
    with pytest.raises(ConfigError, match=r"differs from the run's .*algorithm\.eta.*may change only run\.rounds"):
        resume_overrides(other, out)


# --- the warm ClientApp ---------------------------------------------------------------------------

def test_the_warm_clientapp_serves_the_next_task_past_one_whose_message_never_comes(monkeypatch):
    """A task of a run that stopped (the SuperLink restarted) waits for its message for hours in
    Flower; the loop serves the next task meanwhile, and stops at once when asked."""
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    from fedpd.flower import warm

    tokens = iter(["stale", "fresh"])
    served, release = [], threading.Event()

    class Claim:
        def __init__(self, token):
            self.token = token

        def HasField(self, name):
            return self.token is not None

    class Client:
        def AcquireTask(self, request):
            return Claim(next(tokens, None))

        def close(self):
            pass

    def serve_task(address, token, root_certificates=None, arrived=None, component=None):
        if token == "stale":
            release.wait(30)  # never arrives (until the test ends)
            return
        arrived.set()
        served.append(token)

    monkeypatch.setattr(warm, "_client", lambda *a, **k: Client())
    monkeypatch.setattr(warm, "serve_task", serve_task)
    monkeypatch.setattr(warm, "STUCK_S", 0.2)
    stop = threading.Event()
    loop = threading.Thread(target=warm.serve, args=("127.0.0.1:1",), kwargs={"stop": stop, "poll": 0.01})
    loop.start()
    deadline = time.monotonic() + 20
    while not served and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    loop.join(10)
    release.set()
    assert served == ["fresh"] and not loop.is_alive()


# --- what fedpd status says -----------------------------------------------------------------------

@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="tells a zombie through /proc")
def test_a_killed_server_process_not_yet_reaped_is_died(tmp_path, capsys):
    """A SIGKILLed ServerApp stays a zombie until Flower reaps it, and a zombie still takes signal 0."""
    import signal
    import subprocess
    import sys

    run = tmp_path / "run"
    fedpd.run(CFG, run, transport=Counting(tmp_path / "nodes"))
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10  # not reaped: a zombie
        while Path(f"/proc/{server.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(server.pid, 0)  # (what a check by signal alone believes)
        record = json.loads((run / STATUS).read_text())
        record.update(state="running", round=3, pid=server.pid)
        (run / STATUS).write_text(json.dumps(record))
        assert main(["status", str(run)]) == 1
        said = capsys.readouterr().out
        assert f"died at round 5 of 5 (its server process {server.pid} is gone" in said, said
        assert f"fedpd run --resume {run}" in said
    finally:
        server.wait()


def test_a_refused_resume_leaves_a_finished_run_finished(tmp_path, monkeypatch, capsys):
    """``flwr run --run-config resume=true`` of an app whose config differs from a finished run's is
    refused; the run stays finished (exit 0: a script's ``fedpd status || echo unfinished`` reads
    it right) and the line names the refused attempt."""
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    from flwr.app import Context, RecordDict

    from fedpd.flower import serverapp

    out = tmp_path / "run"
    fedpd.run(CFG, out, transport=Counting(tmp_path / "nodes"))
    finished = json.loads((out / STATUS).read_text())
    (out / STATUS).write_text(json.dumps({**finished, "pid": _dead_pid()}))  # (the ServerApp that ran it, gone)
    monkeypatch.setattr(serverapp, "FlowerTransport", lambda grid, deployed: Counting(tmp_path / "nodes"))
    monkeypatch.setattr(serverapp, "_fail", lambda message: (_ for _ in ()).throw(SystemExit(1)))
    other = load_config({**CFG, "algorithm": {"name": "feddyn", "eta": 3.0}}).to_toml()
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                      run_config={"fedpd-config": other, "out": str(out), "resume": True, "overwrite": False})
    with pytest.raises(SystemExit):
        serverapp._main(None, context)
    assert "differs from the run's" in capsys.readouterr().err
    record = json.loads((out / STATUS).read_text())
    assert record["state"] == "finished" and "differs from the run's" in record["refused"]["error"], record
    assert main(["status", str(out)]) == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith(f"{out}: finished round 5 of 5; a later flwr run on it was refused: resume=true"), said
    # a run that had not finished still says refused (exit 1), as before
    record.update(state="stopped", round=2)
    record.pop("refused")
    (out / STATUS).write_text(json.dumps(record))
    assert record_refusal(out, "another") and main(["status", str(out)]) == 1


def test_a_notice_of_the_runs_end_is_labelled_with_its_last_round(tmp_path, capsys):
    """The run's last commit, sent when the run ends (after round 5), fails on a node: its notice is
    round 5's, not a "round 6" of a 5-round run."""
    from fedpd.remote.messages import Envelope

    class LastCommitFails(Counting):
        def push(self, node, request):
            if request.kind == "commit":  # the run's end: its last round's commit
                self._count += 1
                self._replies[self._count] = Envelope("error", {"error": "disk full"})
                return self._count
            return super().push(node, request)

    run = tmp_path / "run"
    fedpd.run(CFG, run, transport=LastCommitFails(tmp_path / "nodes"))
    notices = json.loads((run / STATUS).read_text())["notices"]
    assert notices and all("the commit of round 5 did not reach it" in n["text"] for n in notices), notices
    assert {n["round"] for n in notices} == {5}, notices
    capsys.readouterr()
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert "  round 5: " in out and "round 6" not in out, out


# --- fedpd flower connection --wait ---------------------------------------------------------------

class _Listener:
    """A server on 127.0.0.1 that answers every connection with a TLS handshake (``certs``: the
    folder of a ``fedpd flower certs``) or, without, accepts and closes it; in a thread, until closed."""

    def __init__(self, certs: Path | None):
        import socket
        import ssl

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.context = None
        if certs is not None:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(certs / "server.crt", certs / "server.key")
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import ssl

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            try:
                conn.settimeout(5)
                if self.context is not None:
                    conn = self.context.wrap_socket(conn, server_side=True)
                else:
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    def close(self) -> None:
        import socket

        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # (wakes the accept)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(10)


def test_connection_wait_completes_a_tls_handshake_with_the_given_ca(tmp_path, capsys, monkeypatch):
    """``--wait`` with ``--root-certificates``: the SuperLink answers only when a TLS handshake with
    that CA succeeds. Another CA's certificate, or a SuperLink without TLS, is one line at once,
    naming the certificate (not "answers", then a network error from flwr run)."""
    from fedpd.flower.deploy import make_certificates

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    make_certificates(tmp_path / "ours", nodes=1)
    make_certificates(tmp_path / "other", nodes=1)
    ours, other = tmp_path / "ours" / "ca.crt", tmp_path / "other" / "ca.crt"
    tls, plain = _Listener(tmp_path / "ours"), _Listener(None)
    try:
        def connection(address, ca, wait="20"):
            capsys.readouterr()
            code = main(["flower", "connection", "x", "--address", address, "--root-certificates", str(ca), "--wait",
                         wait])
            said = capsys.readouterr()
            return code, said.out, said.err.strip()

        code, out, err = connection(tls.address, ours)
        assert code == 0 and f"the SuperLink at {tls.address} answers" in out, (out, err)
        start = time.monotonic()
        code, out, err = connection(tls.address, other)
        assert time.monotonic() - start < 10  # at once, not after --wait
        assert code == 2 and len(err.splitlines()) == 1 and "answers" not in out, (out, err)
        assert f"--root-certificates {str(other)!r}" in err and "did not sign" in err, err
        code, out, err = connection(plain.address, ours)
        assert code == 2 and len(err.splitlines()) == 1 and "does not speak TLS" in err, (out, err)
        (tmp_path / "bad.crt").write_text("not a certificate\n")
        code, out, err = connection(tls.address, tmp_path / "bad.crt")
        assert code == 2 and "not a PEM CA certificate" in err and len(err.splitlines()) == 1, err
    finally:
        tls.close(), plain.close()


def test_an_app_the_server_would_refuse_is_refused_when_it_is_written(tmp_path, capsys):
    """``--set sampler.clients_per_round=100`` of a 30-client problem: refused by ``fedpd flower
    app`` in one line, no app written (not 27 s into ``flwr run``)."""
    example = ROOT / "examples" / "feddyn.toml"
    argv = ["flower", "app", str(example), "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run")]
    assert main([*argv, "--set", "sampler.clients_per_round=100"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sampler.clients_per_round: 100 exceeds the problem's 30 clients" in err, err
    assert not (tmp_path / "app").exists()
    assert main(argv) == 0 and (tmp_path / "app" / "pyproject.toml").is_file()


# --- a node whose reply does not come -------------------------------------------------------------

def test_flower_replies_of_a_stopped_clientapp_are_lost_with_the_reason(monkeypatch):
    """Flower's Grid answers a message whose ClientApp it stopped (no heartbeat) with an error reply
    of code 8: lost, with Flower's words (said by the engine); codes 3-5 (expired, node
    unavailable) are lost in silence, as before; a ClientApp that raised (2) is an error reply."""
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    from types import SimpleNamespace

    from flwr.app import Error

    from fedpd.flower.transport import FlowerTransport
    from fedpd.remote.engine import LOST, Lost

    def reply(handle, code):
        return SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=handle), has_error=lambda: True,
                               error=Error(code=code, reason={8: "ClientApp stopped responding."}.get(code, "why")))

    grid = SimpleNamespace(pull_messages=lambda ids: [reply(h, int(h)) for h in ids])
    transport = FlowerTransport(grid, deployed=True)
    out = transport.pull(["8", "5", "2"])
    assert isinstance(out["8"], Lost) and out["8"] == LOST, out
    assert out["8"].why == "Flower stopped its ClientApp (error 8: ClientApp stopped responding)"
    assert out["5"] == LOST and not getattr(out["5"], "why", "")
    assert out["2"].kind == "error" and "Flower error 2" in out["2"].config["error"]
    assert transport.stall_after == 90 and "Task stopped" in transport.stall_hint  # said when a reply stalls


class _Stopping(Counting):
    """Loopback nodes whose node 1 never answers requests of ``kind`` from round ``after`` on:
    ``why`` given, the transport reports each lost with it (as Flower's error 8); else nothing comes
    (a ClientApp Flower keeps stopping at its launch, in silence)."""

    def __init__(self, root: Path, kind: str, why: str = "", stall_after: float | None = None, after: int = 1):
        super().__init__(root)
        self.kind, self.why, self.after, self.sent = kind, why, after, 0
        if stall_after is not None:
            self.stall_after, self.stall_hint = stall_after, "the transport's hint"

    def push(self, node, request):
        if node == 1 and request.kind == self.kind and request.config.get("round", self.after) >= self.after:
            self.sent += 1
            self._count += 1
            if self.why:
                from fedpd.remote.engine import Lost

                self._replies[self._count] = Lost(self.why)
            return self._count
        return super().push(node, request)


def test_a_clientapp_flower_stops_again_and_again_is_said_and_not_waited_for(tmp_path, capsys):
    """Each reply of round 2's train on node 1 is lost as Flower stopped its ClientApp: the server
    says so each time, sends the work at most three times, and its clients drop out of the round
    at once (node_timeout is 600 s), the reason named."""
    from fedpd.remote.engine import LOSSES

    why = "Flower stopped its ClientApp (error 8: ClientApp stopped responding)"
    nodes = _Stopping(tmp_path / "nodes", "train", why=why)
    cfg = {**CFG, "run": {**CFG["run"], "rounds": 2}}
    start = time.monotonic()
    result = fedpd.run(cfg, tmp_path / "run", transport=nodes)
    assert time.monotonic() - start < 60 and nodes.sent == LOSSES == 3
    err = capsys.readouterr().err
    assert err.count(f"the node of clients 3-5 (node id 1): {why} during train; sent again") == 2, err
    assert f"{why}, 3 times during train: not sent again" in err, err
    dropped = re.search(
        rf"no reply to train in round 2 \({re.escape(why)}, 3 times\); its (\d+) client\(s\) dropped out", err
    )
    assert dropped and result.history[-1]["dropouts"] == int(dropped.group(1)) > 0, err
    notices = [n["text"] for n in json.loads((tmp_path / "run" / STATUS).read_text())["notices"]]
    assert sum(why in n for n in notices) == 4, notices


def test_a_connected_node_that_does_not_answer_is_said_before_the_timeout(tmp_path, capsys):
    """Node 1 never answers round 2's train (its messages lost on the node, with no word from
    Flower): after the transport's stall time one line says so, with the transport's hint, while
    the server still waits run.node_timeout for it; then its clients drop out, as before."""
    nodes = _Stopping(tmp_path / "nodes", "train", stall_after=0.5)
    cfg = {**CFG, "run": {**CFG["run"], "rounds": 2, "node_timeout": 4.0}}
    result = fedpd.run(cfg, tmp_path / "run", transport=nodes)
    err = capsys.readouterr().err
    stalled = [line for line in err.splitlines() if "no reply to train after" in line]
    assert len(stalled) == 1, err
    assert stalled[0] == ("fedpd: the node of clients 3-5 (node id 1): no reply to train after 0.5 s, though it is "
                          "connected: the transport's hint; waiting up to 4 s (run.node_timeout) in all"), stalled
    dropped = re.search(r"no reply to train in round 2; its (\d+) client\(s\) dropped out", err)
    assert dropped and result.history[-1]["dropouts"] == int(dropped.group(1)) > 0, err


def test_the_runs_last_commit_is_not_waited_for_past_the_stall(tmp_path, capsys):
    """The run's end sends its last round's commit (deployments defer it); a node that does not
    answer it is said after the stall time and not waited for up to run.node_timeout: the run is
    done, and a resume commits it."""
    nodes = _Stopping(tmp_path / "nodes", "commit", stall_after=0.5, after=0)
    cfg = {**CFG, "run": {**CFG["run"], "rounds": 2}}  # node_timeout: 600 s
    start = time.monotonic()
    fedpd.run(cfg, tmp_path / "run", transport=nodes)
    assert time.monotonic() - start < 60
    err = capsys.readouterr().err
    assert (
        "no reply to commit after 0.5 s, though it is connected: the transport's hint: not waited for any longer" in err
    )
    assert "the commit of round 2 did not reach it (no reply after 0.5 s); its clients' states" in err, err


def test_the_docs_command_tells_a_run_that_finished_with_notices(tmp_path, monkeypatch, capsys):
    """docs/deployment.md's command for a script, as written: a run that finished with notices (a
    train of node 1 that never came back: its clients dropped out) exits 0 like a run nothing
    happened to, and the JSON's ``notices`` tell the two apart."""
    import shlex

    doc = (ROOT / "docs" / "deployment.md").read_text()
    commands = set(re.findall(r"`(fedpd status deploy/run --format json)`", doc))
    assert len(commands) == 1, commands
    argv = shlex.split(commands.pop())[1:]
    cfg = {**CFG, "run": {**CFG["run"], "rounds": 2, "node_timeout": 1.0}}
    said = {}
    for name, nodes in (("quiet", Counting(tmp_path / "n0")), ("noticed", _Stopping(tmp_path / "n1", "train"))):
        fedpd.run(cfg, tmp_path / name / "deploy" / "run", transport=nodes)
        monkeypatch.chdir(tmp_path / name)
        capsys.readouterr()
        assert main(argv) == 0
        said[name] = json.loads(capsys.readouterr().out)[0]
    assert said["quiet"]["state"] == said["noticed"]["state"] == "finished"
    assert said["quiet"]["notices"] == [] and "dropped out" in said["noticed"]["notices"][-1]["text"], said
