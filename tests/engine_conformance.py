"""The engine conformance suite: what every engine must do, tested the same way for each.

An engine is named by the ``run.*`` overrides that select it (``["run.engine=inprocess",
"run.client_chunk=1"]``; a Flower or Ray engine brings its own). Subclass
:class:`EngineConformance` in a test module and set ``ENGINE`` (or parametrise the ``engine``
fixture) — every test below then runs against it, comparing with the reference: the in-process
engine with all participants in one chunk. See the contract in :mod:`fedpd.engine`.

What is checked: the metrics equal the reference's bit for bit (chunking, order of the
participants), faults behave as the protocol says (a client that drops out or whose upload is
rejected keeps its state, and is counted), FedPD's skipped rounds send nothing, and a run
continued from a checkpoint equals the uninterrupted one.

The algorithms are ``CASES``, one per role the tests need (keys name the built-in that plays it):
a sampled algorithm with client state and a reply, a stateless one, and one that communicates in
some rounds only. A subclass may set its own ``CASES`` (a user's algorithms: tests/user_plugins.py).
"""

from __future__ import annotations

import json

import pytest
import torch

import fedpd
from fedpd.config import load_config
from fedpd.simulation import Simulation

PROBLEM = {"name": "synthetic", "clients": 8, "dim": 4, "classes": 3, "max_client_samples": 20, "seed": 2}
SGD = {"name": "sgd", "lr": 0.05, "local_steps": 3, "batch_size": 4, "straggler_fraction": 0.3}
CASES = {
    # a sampled algorithm with client state and a reply, and a stateless one
    "afedpd": {"algorithm": {"name": "afedpd", "eta": 10.0}, "sampler": {"name": "uniform", "clients_per_round": 5}},
    "fedavg": {"algorithm": {"name": "fedavg"}, "sampler": {"name": "uniform", "clients_per_round": 5}},
    # every client every round, communication skipped in about half the rounds
    "fedpd": {"algorithm": {"name": "fedpd", "eta": 1.0, "p": 0.5}, "sampler": {"name": "all"}},
}


#: simulated time (fedpd.system): slow, varied devices that come and go, and a deadline that drops
#: some uploads; the same fleet under FedBuff's asynchronous server
FLEET = {"speed": {"dist": "lognormal", "median": 1e3, "sigma": 1.0}, "availability": "markov", "mean_on_s": 5.0,
         "mean_off_s": 2.0}
TIMED = {"deadline": {"system": {**FLEET, "deadline_s": 1.5}},
         "fedbuff": {"system": FLEET, "asynchronous": {"concurrency": 4, "buffer": 2}}}


def config(case: str, rounds: int = 6, **sections) -> dict:
    cfg = {"problem": PROBLEM, "solver": SGD, "run": {"rounds": rounds, "eval_every": 2, "seed": 5, "dtype": "float64"},
           **CASES[case]}
    cfg.update(sections)
    return cfg


def states(sim: Simulation, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The states of clients ``ids``, read through the evaluation view every engine's store has."""
    return {k: sim.store.full(k)[ids] for k in sim.algorithm.init_client(sim.problem.x_init)}


def records(result) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in result.history]


class EngineConformance:
    """Tests any engine passes; ``engine`` is a list of ``run.*`` overrides selecting it."""

    ENGINE: list[str] = []
    CASES: dict[str, dict] = CASES

    def config(self, case: str, rounds: int = 6, **sections) -> dict:
        return {**config("fedavg", rounds, **sections), **self.CASES[case], **sections}

    def timed(self, timing: str, rounds: int = 6) -> dict:
        """The stateless case on the simulated fleet (:data:`TIMED`); FedBuff (on FedAvg itself: a user's
        server step may read every upload) draws its own clients."""
        cfg = self.config("fedavg", rounds, **TIMED[timing])
        if "asynchronous" in cfg:
            del cfg["sampler"]
            cfg["algorithm"] = {"name": "fedavg"}
        return cfg

    @pytest.fixture
    def engine(self) -> list[str]:
        return list(self.ENGINE)

    def run(self, cfg: dict, engine: list[str] | None = None, **kw):
        return fedpd.run(cfg, overrides=engine or [], **kw)

    def resume(self, out, overrides: list[str]):
        return fedpd.run(resume=out, overrides=overrides)

    def simulation(self, cfg: dict, engine: list[str]) -> Simulation:
        return Simulation(load_config(cfg, engine))

    # --- same numbers as the reference ---------------------------------------------------------
    @pytest.mark.parametrize("case", sorted(CASES))
    def test_metrics_equal_the_reference(self, engine, case):
        assert records(self.run(self.config(case), engine)) == records(self.run(self.config(case)))

    def test_order_of_participants_does_not_matter(self, engine, monkeypatch):
        reference = records(self.run(self.config("afedpd")))
        draw = Simulation.participants
        monkeypatch.setattr(Simulation, "participants", lambda self, t: draw(self, t).flip(0))
        assert records(self.run(self.config("afedpd"), engine)) == reference

    @pytest.mark.parametrize("timing", sorted(TIMED))
    def test_simulated_time_and_who_takes_part_equal_the_reference(self, engine, timing):
        reference = records(self.run(self.timed(timing)))
        assert reference[-1]["dropouts"] > 0 and reference[-1]["sim_time_s"] > 0  # the fleet bites
        assert records(self.run(self.timed(timing), engine)) == reference

    # --- faults -----------------------------------------------------------------------------
    def test_dropped_clients_keep_their_state_and_are_counted(self, engine):
        cfg = self.config("afedpd", rounds=1, attack={"name": "dropout", "fraction": 0.5, "seed": 1})
        sim = self.simulation(cfg, engine)
        ids = sim.participants(0)
        before = states(sim, ids)
        sim.step()
        after = states(sim, ids)
        dropped = sim.engine.attack.mask[ids]
        assert 0 < int(dropped.sum()) < ids.numel() and sim.comm.dropouts == int(dropped.sum())
        for key in before:
            assert torch.equal(after[key][dropped], before[key][dropped])
            assert not torch.equal(after[key][~dropped], before[key][~dropped])
        # they received the broadcast but sent nothing
        k, d = ids.numel(), sim.problem.dim
        assert sim.comm.uplink_floats == (k - int(dropped.sum())) * d
        assert records(self.run(cfg, engine)) == records(self.run(cfg))

    def test_rejected_uploads_keep_their_state_and_are_counted(self, engine):
        cfg = self.config("afedpd", rounds=1, attack={"name": "nan", "parties": [0, 3, 6]})
        sim = self.simulation(cfg, engine)
        ids = sim.participants(0)
        before = states(sim, ids)
        sim.step()
        bad = sim.engine.attack.mask[ids]
        assert sim.comm.rejected_uploads == int(bad.sum()) > 0
        after = states(sim, ids)
        for key in before:
            assert torch.equal(after[key][bad], before[key][bad])
        assert torch.isfinite(sim.server["x0"]).all()
        assert records(self.run(self.config("afedpd", attack={"name": "nan", "parties": [0, 3, 6]}), engine)) == \
            records(self.run(self.config("afedpd", attack={"name": "nan", "parties": [0, 3, 6]})))

    def test_skipped_rounds_send_nothing(self, engine):
        sim = self.simulation(self.config("fedpd", rounds=10), engine)
        sent = []
        for _ in range(10):
            before = (sim.comm.uplink_floats, sim.comm.downlink_floats)
            sim.step()
            sent.append((sim.comm.uplink_floats - before[0], sim.comm.downlink_floats - before[1]))
        skipped = [s for s in sent if s == (0, 0)]
        assert 0 < len(skipped) < 10 and sim.comm.comm_rounds == 10 - len(skipped)
        # a communicating round: every client sends z_i and gets x0 back
        n, d = sim.num_clients, sim.problem.dim
        assert all(s == (n * d, n * d) for s in sent if s != (0, 0))

    # --- exact resume -----------------------------------------------------------------------
    @pytest.mark.parametrize("case", ["afedpd", "fedpd"])
    def test_resume_from_a_checkpoint_is_exact(self, engine, case, tmp_path):
        straight = records(self.run(self.config(case, rounds=6), engine))
        out = tmp_path / "run"
        self.run(self.config(case, rounds=3), engine, out=out)
        resumed = self.resume(out, [*[o for o in engine if o.startswith("run.")], "run.rounds=6"])
        assert records(resumed) == straight
        assert [json.loads(line)["round"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [0, 2, 4, 6]

    @pytest.mark.parametrize("timing", sorted(TIMED))
    def test_resume_of_a_timed_run_is_exact(self, engine, timing, tmp_path):
        """The clock, the availability chains and (FedBuff) the clients in flight with their uploads
        and the buffer are in the checkpoint."""
        straight = records(self.run(self.timed(timing, rounds=6), engine))
        out = tmp_path / "run"
        self.run(self.timed(timing, rounds=3), engine, out=out)
        resumed = self.resume(out, [*[o for o in engine if o.startswith("run.")], "run.rounds=6"])
        assert records(resumed) == straight
