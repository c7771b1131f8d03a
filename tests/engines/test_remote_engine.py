"""The remote engine against nodes that misbehave (the loopback transport injects the faults):
bad federations are refused before any round, a failed or malformed reply is a rejected upload,
a lost reply is sent again, a node that crashes and comes back under a new id takes its clients
with it and the run ends with the same metrics, a node that never comes back drops out."""

from __future__ import annotations

import pytest
import torch

import fedpd
from fedpd.build import build, build_problem
from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.remote.engine import LoopbackTransport, RemoteEngine
from fedpd.remote.messages import Envelope
from fedpd.remote.node import NodeRuntime
from fedpd.simulation import Simulation

CFG = {"problem": {"name": "least_squares", "clients": 6, "dim": 3, "samples_per_client": 8},
       "algorithm": {"name": "afedpd", "eta": 2.0},
       "solver": {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4},
       "sampler": {"name": "uniform", "clients_per_round": 4},
       "run": {"rounds": 5, "eval_every": 1, "seed": 4, "engine": "loopback", "nodes": 2}}


def records(history) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in history]


def remote_engine(tmp_path, hosted: list[list[int]]) -> RemoteEngine:
    cfg = load_config(CFG)
    problem = build_problem(cfg)
    algorithm, _, _ = build(cfg, problem)
    transport = LoopbackTransport({k: NodeRuntime(h, tmp_path / f"n{k}", durable=False) for k, h in enumerate(hosted)})
    return RemoteEngine(algorithm, cfg.to_toml(), transport, num_clients=6, seed=4,
                        init_client=algorithm.init_client(problem.x_init))


@pytest.mark.parametrize("hosted, needle", [
    ([[0, 1, 2], [], [3, 4, 5]], "hosts no client"),
    ([[0, 1, 2, 3], [3, 4, 5]], "client 3 is hosted twice"),
    ([[0, 1], [3, 4, 5]], "clients 2 are hosted by no node"),
    ([[0, 1, 2], [3, 4, 5, 9]], "hosts client 9"),
])
def test_a_bad_federation_is_one_line_before_any_round(tmp_path, hosted, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")) as err:
        remote_engine(tmp_path, hosted)
    assert "\n" not in str(err.value)


def test_a_node_whose_train_fails_has_its_uploads_rejected_and_the_run_goes_on(tmp_path, capsys):
    sim = Simulation(load_config(CFG), workdir=tmp_path)
    transport = sim.engine.transport
    runtime = transport.runtimes[1]
    original = runtime._train
    runtime._train = lambda request: (_ for _ in ()).throw(RuntimeError("out of memory"))
    ids = sim.participants(0)
    on_node1 = [i for i in ids.tolist() if i >= 3]
    sim.step()
    assert sim.comm.rejected_uploads == len(on_node1) > 0
    err = capsys.readouterr().err
    # the server names the node by its clients and counts rounds from 1, as its progress
    # does; the node's own log says what it refused
    assert "fedpd: the node of clients 3-5 (node id 1): train failed (RuntimeError: out of memory) in round 1;" in err
    assert "fedpd node (clients 3-5): train of round 1 refused: RuntimeError: out of memory" in err
    state = sim.store.full("lam")
    assert torch.equal(state[on_node1], torch.zeros_like(state[on_node1]))  # their states were kept
    runtime._train = original
    sim.step()
    assert torch.isfinite(sim.server["x0"]).all()


@pytest.mark.parametrize("fault", ["malformed", "oversized"])
def test_malformed_or_oversized_replies_are_rejected_uploads(tmp_path, capsys, fault):
    sim = Simulation(load_config(CFG), workdir=tmp_path)
    runtime = sim.engine.transport.runtimes[0]
    honest = runtime.handle

    def handle(request):
        reply = honest(request)
        if request.kind == "train" and fault == "malformed":
            reply.config["ids"] = reply.config["ids"][::-1] + [99]
        return reply

    runtime.handle = handle
    if fault == "oversized":
        sim.engine.max_reply_bytes = 10
    sim.step()
    on_node0 = [i for i in sim.participants(0).tolist() if i < 3]
    assert sim.comm.rejected_uploads >= len(on_node0) > 0
    assert ("malformed" if fault == "malformed" else "oversized reply") in capsys.readouterr().err


def test_lost_replies_are_sent_again_with_the_same_result(tmp_path):
    reference = records(fedpd.run(CFG).history)
    sim = Simulation(load_config(CFG), workdir=tmp_path)
    sim.engine.transport.lose = {0: 2, 1: 1}  # lost on the way: train, commit, ...
    history = [sim.metrics()]
    for _ in range(5):
        sim.step()
        history.append(sim.metrics())
    assert records(history) == reference


@pytest.mark.parametrize("kind", ["train", "commit"])
def test_a_node_that_crashes_and_comes_back_under_a_new_id_keeps_the_run_exact(tmp_path, kind):
    """Killed while working on a request (never answered, its dead id still listed); back at
    once under a new id with the same clients and files: the engine learns who hosts them now,
    sends the work again, and the metrics are those of the run without the crash."""
    reference = records(fedpd.run(CFG).history)
    sim = Simulation(load_config(CFG), workdir=tmp_path)
    history = [sim.metrics()]
    for t in range(5):
        if t == 2:
            sim.engine.transport.crash_on = {1: kind}
        sim.step()
        history.append(sim.metrics())
    assert records(history) == reference
    assert 1 in sim.engine.transport.dead and 1 not in sim.engine.hosted  # the clients moved


def test_a_node_that_never_answers_drops_out(tmp_path, capsys):
    sim = Simulation(load_config(CFG), workdir=tmp_path)
    engine = sim.engine
    engine.timeout = 0.2
    engine.transport.dead.add(0)  # listed, accepts messages, never answers
    engine.transport.runtimes.pop(0)
    ids = sim.participants(0)
    sim.step()
    on_node0 = [i for i in ids.tolist() if i < 3]
    assert sim.comm.dropouts == len(on_node0) > 0
    assert "no reply to train" in capsys.readouterr().err


def test_hello_and_states_are_not_counted_as_communication(tmp_path):
    sim = Simulation(load_config({**CFG, "algorithm": {"name": "fedpd", "eta": 1.0},
                                  "sampler": {"name": "all"}}), workdir=tmp_path)
    sim.step()
    up, down = sim.comm.uplink_floats, sim.comm.downlink_floats
    sim.metrics()  # FedPD's model is the mean of the clients' anchors: a states query to every node
    assert (sim.comm.uplink_floats, sim.comm.downlink_floats) == (up, down) == (6 * 3, 6 * 3)


def test_a_run_without_a_directory_leaves_no_node_files_behind(tmp_path, monkeypatch):
    import gc
    import tempfile

    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sim = Simulation(load_config({"problem": {"name": "least_squares", "clients": 4, "dim": 3},
                                  "algorithm": {"name": "feddyn"}, "solver": {"name": "exact"},
                                  "run": {"engine": "loopback", "rounds": 2}}))
    sim.step()
    assert [p.name.startswith("fedpd-nodes-") for p in tmp_path.iterdir()] == [True]
    del sim
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_a_node_that_comes_back_and_refuses_the_run_is_said(tmp_path, capsys, monkeypatch):
    """A restarted node whose hello is refused (e.g. its store-dir is another node's) is named on
    the server, with the node's reason — not only in the node's own log."""
    sim = Simulation(load_config(CFG), workdir=tmp_path)
    sim.step()
    handle = NodeRuntime.handle

    def refusing(self, request):
        if request.kind == "hello" and self is not sim.engine.transport.runtimes.get(0):
            return Envelope("hello", {"error": "store-dir '/x' is held by the node of clients 3-5"})
        return handle(self, request)

    monkeypatch.setattr(NodeRuntime, "handle", refusing)
    sim.engine.timeout = 1.0  # node 1's clients are then nobody's: they drop out after it
    sim.engine.transport.crash_on = {1: "train"}
    sim.step()
    err = capsys.readouterr().err
    assert "joined and refused the run: store-dir '/x' is held by the node of clients 3-5" in err
