"""The streamed round: a rule whose server step is a plain mean (``means_only``) with no
update attack sums the uploads as the in-process engine hands them over, chunk by chunk in
ascending id order, instead of stacking all K. It must give the stacked round's aggregate bit
for bit (both add the clients' terms one at a time in id order: ``UploadMean``), screen the same
rows, and really let each chunk's uploads go before the next chunk trains."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from fedpd import registry
from fedpd.algorithms.fedavg import FedAvg
from fedpd.attacks import Attack
from fedpd.defence import build_defence
from fedpd.comm import CommCounter
from fedpd.engine import InProcessEngine
from fedpd.protocol import run_round
from helpers import simulation

PROBLEM = {"name": "synthetic", "clients": 9, "dim": 5, "classes": 3, "max_client_samples": 20, "seed": 2}
SGD = {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4, "straggler_fraction": 0.4}
#: every registered rule that declares its server step a plain mean of the uploads (``means_only``):
#: each is checked bit for bit against the stacked round below, a new one included
MEANS_ONLY = tuple(sorted(n for n, e in registry.ALGORITHMS.items() if e.build().means_only))
#: the built-ins whose round streams: one of them losing its declaration (and the streamed path) fails
STREAMED = ("fedavg", "fedprox", "fedsam", "ditto", "perfedavg", "scaffold", "fedcm", "fedpd", "feddyn", "fedadmm",
            "afedpd", "afedpdsam", "fedspeed", "fedpd_vr", "primal_dual", "parallel_admm", "stochastic_admm",
            "fedavgm", "fedadagrad", "fedadam", "fedyogi", "qffl", "fednova")


def run(name: str, streamed: bool, monkeypatch, chunk: int = 0, rounds: int = 3):
    cls = registry.ALGORITHMS[name].build
    monkeypatch.setattr(InProcessEngine, "in_id_order", streamed)
    solver = {k: v for k, v in SGD.items() if k not in cls.unused_solver_options} if cls.uses_solver else None
    sampler = {"name": "all"} if cls.participation == "all" else {"name": "uniform", "clients_per_round": 6}
    sim = simulation({"name": name}, problem=PROBLEM, solver=solver, sampler=sampler,
                     run={"rounds": rounds, "dtype": "float64", "client_chunk": chunk})
    for _ in range(rounds):
        sim.step()
    return sim


def test_the_rules_declared_means_only_are_the_expected_ones():
    declared = {n for n, e in registry.ALGORITHMS.items() if e.build().means_only}
    assert declared >= set(STREAMED)


@pytest.mark.parametrize("name", MEANS_ONLY)
def test_streamed_round_equals_stacked_round_bitwise(name, monkeypatch):
    stacked = run(name, False, monkeypatch)
    for chunk in (0, 1, 4):
        streamed = run(name, True, monkeypatch, chunk)
        assert streamed.server.keys() == stacked.server.keys()
        for k, v in stacked.server.items():
            assert torch.equal(streamed.server[k], v), (name, chunk, k)
        assert streamed.engine.comm.state_dict() == stacked.engine.comm.state_dict()


def test_robust_aggregator_keeps_the_stacked_path():
    assert not FedAvg(build_defence("coordinate_median")).means_only
    assert FedAvg().means_only


class Groups:
    """A client half that yields prepared groups and records what is still alive when each group
    is handed over (``in_id_order``: as the in-process engine declares)."""

    in_id_order = True

    def __init__(self, groups):
        self.groups, self.alive, self.committed = groups, [], None

    def train(self, message, ids, round):
        refs = []
        while self.groups:
            ids_g, up = self.groups.pop(0)
            gc.collect()
            self.alive.append(sum(r() is not None for r in refs))
            refs.append(weakref.ref(up["x"]))
            yield ids_g, up
            del up

    def commit(self, ids, reply, round):
        self.committed = ids


def uploads(rows: list[list[float]]):
    x = torch.tensor(rows, dtype=torch.float64)
    return {"x": x}


def round_with(groups, streamed: bool):
    clients = Groups(groups)
    clients.in_id_order = streamed
    comm, algorithm = CommCounter(), FedAvg()
    server = algorithm.init_server(torch.zeros(2, dtype=torch.float64))
    ids = torch.cat([g for g, _ in groups])
    server = run_round(algorithm, server, ids, 0, clients=clients, comm=comm, attack=Attack().bind(10), seed=0,
                       num_clients=10)
    return server, comm, clients


def test_streamed_round_lets_each_group_go_before_the_next_and_screens_like_the_stacked():
    def groups():
        return [(torch.tensor([1, 2]), uploads([[1.0, 2.0], [float("nan"), 0.0]])),
                (torch.tensor([4]), uploads([[3.0, 5.0]])),
                (torch.tensor([6]), {"x": torch.ones(1, 3, dtype=torch.float64)}),  # wrong shape: rejected
                (torch.tensor([7, 9]), uploads([[0.5, 0.25], [2.0, float("inf")]]))]

    s_server, s_comm, s_clients = round_with(groups(), streamed=True)
    t_server, t_comm, t_clients = round_with(groups(), streamed=False)
    assert s_clients.alive == [0, 0, 0, 0]  # no earlier group's upload is held when the next comes
    assert t_clients.alive[-1] > 0  # (the stacked round does hold them: the check can fail)
    assert s_clients.committed.tolist() == t_clients.committed.tolist() == [1, 4, 7]
    assert torch.equal(s_server["x0"], t_server["x0"])
    assert torch.equal(s_server["x0"], torch.tensor([4.5 / 3, 7.25 / 3], dtype=torch.float64))
    assert s_comm.state_dict() == t_comm.state_dict()
    assert s_comm.rejected_uploads == 3


def test_streamed_round_refuses_groups_out_of_id_order():
    groups = [(torch.tensor([4]), uploads([[1.0, 0.0]])), (torch.tensor([2]), uploads([[0.0, 1.0]]))]
    with pytest.raises(RuntimeError, match="out of id order"):
        round_with(groups, streamed=True)


class HalfStep(FedAvg):
    """A user's FedAvg subclass with its own server step in ``aggregate`` (no ``aggregate_means``)."""

    def aggregate(self, server, uploads, ctx):
        averaged, reply = super().aggregate(server, uploads, ctx)
        return {**averaged, "x0": (server["x0"] + averaged["x0"]) / 2}, reply


def test_a_subclass_overriding_aggregate_gets_the_stacked_round_and_its_step_is_taken():
    from fedpd.algorithms.base import streams_means
    from fedpd.algorithms.fedopt import FedAdam

    assert streams_means(FedAvg()) and streams_means(FedAdam())
    assert HalfStep().means_only and not streams_means(HalfStep())
    torch.manual_seed(0)
    x0, ids = torch.randn(4, dtype=torch.float64), torch.arange(3)

    class Clients:  # uploads x_i = x0 + i, handed over in id order
        in_id_order = True

        def train(self, message, ids, round):
            yield ids, {"x": message["x0"] + ids[:, None].to(torch.float64)}

        def commit(self, ids, reply, round):
            pass

    server = run_round(HalfStep(), {"x0": x0}, ids, 1, clients=Clients(), comm=CommCounter(),
                       attack=Attack().bind(3), seed=0, num_clients=3)
    assert torch.allclose(server["x0"], x0 + 0.5)  # (x0 + mean_i (x0 + i)) / 2 = x0 + 1/2


@pytest.mark.parametrize("finite, steps", [(1, False), (18, False), (19, True)])
def test_a_round_with_fewer_usable_rows_than_the_rule_needs_is_void_not_a_crash(finite, steps):
    # NNM -> Bulyan with f = 4 needs K >= 4f + 3 = 19 rows. A round in which only ``finite`` of 20
    # uploads are finite (a broken run under IPM) leaves the server as it was and rejects all 20,
    # as a round with none usable does; it used to raise NNM's ConfigError and end the run.
    rows = torch.full((20, 2), float("nan"), dtype=torch.float64)
    rows[:finite] = torch.arange(2 * finite, dtype=torch.float64).reshape(finite, 2) / 10
    clients = Groups([(torch.arange(20), {"x": rows})])
    algorithm = FedAvg(build_defence("bulyan", {"n_byzantine": 4, "pre": "nnm"}))
    assert algorithm.min_uploads() == 19
    comm = CommCounter()
    x0 = torch.full((2,), 7.0, dtype=torch.float64)
    server = run_round(algorithm, algorithm.init_server(x0), torch.arange(20), 0, clients=clients, comm=comm,
                       attack=Attack().bind(20), seed=0, num_clients=20)
    assert torch.equal(server["x0"], x0) is not steps
    assert comm.rejected_uploads == (20 - finite if steps else 20)
    assert clients.committed.numel() == (finite if steps else 0)
