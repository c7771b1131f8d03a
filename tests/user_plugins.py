"""A user's code for the plug-in tests: modules written into a directory outside the repository
(a pytest temporary directory), each under a name of its own so that no two tests share a module
in ``sys.modules``.

``ALGORITHMS`` are three algorithms as a user writes them, one for each role the engine
conformance suite needs (tests/engine_conformance.py): a sampled rule with client state and a
reply written on :class:`fedpd.Algorithm` alone, a stateless FedAvg subclass with its own server
step, and a FedPD subclass (every client, communication skipped at random)."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

ALGORITHMS = '''
"""A user's algorithms, outside fedpd."""
import torch
from pydantic import Field

import fedpd
from fedpd.algorithms import FedAvg, FedPD, LocalObjective, expand


class DualAverage(fedpd.Algorithm):
    """Client i keeps a dual λ_i, minimises f_i + <λ_i, x> + ||x - x0||²/(2η) from x0 and sends
    x_i; the server averages and replies the shift of x0, which the senders fold into λ_i."""

    name = "dual_average"
    description = "a user's primal-dual rule with a reply"

    class Options(fedpd.Options):
        eta: float = Field(1.0, gt=0, description="the penalty")

    def __init__(self, eta=1.0):
        self.eta = eta

    def init_client(self, x0):
        return {"lam": torch.zeros_like(x0)}

    def local(self, message, clients, ctx):
        x0 = expand(message["x0"], ctx.ids.numel())
        res = ctx.solver.solve(ctx, x0, LocalObjective(linear=clients["lam"], mu=1 / self.eta, center=x0))
        return {"x": res.x}, {"lam": clients["lam"] + (res.x - x0) / self.eta}

    def aggregate(self, server, uploads, ctx):
        x0 = uploads["x"].mean(0)
        return {"x0": x0}, {"shift": x0 - server["x0"]}

    def receive(self, clients, reply, ctx):
        return {"lam": clients["lam"] - 0.5 * reply["shift"] / self.eta}


class ServerStep(FedAvg):
    """FedAvg whose server moves a fraction gamma of the way to the mean."""

    name = "server_step"

    class Options(FedAvg.Options):
        gamma: float = Field(0.8, gt=0, description="the server's step")

    def __init__(self, gamma=0.8, **options):
        super().__init__(**options)
        self.gamma = gamma

    def aggregate(self, server, uploads, ctx):
        new, reply = super().aggregate(server, uploads, ctx)
        return {**new, "x0": server["x0"] + self.gamma * (new["x0"] - server["x0"])}, reply


class CoinFedPD(FedPD):
    """FedPD under another name."""


class MyFedAvg(FedAvg):
    """FedAvg, unchanged: must give fedavg's numbers bit for bit."""
'''


def write_module(directory: Path, source: str, stem: str = "user_code") -> str:
    """``source`` as a module of a fresh name in ``directory``; its name."""
    name = f"{stem}_{uuid.uuid4().hex[:8]}"
    (Path(directory) / f"{name}.py").write_text(textwrap.dedent(source))
    return name


def cases(module: str) -> dict[str, dict]:
    """The conformance suite's three roles (keys as in its CASES), played by ``module``'s algorithms."""
    return {
        "afedpd": {"algorithm": {"name": f"{module}:DualAverage", "eta": 2.0},
                   "sampler": {"name": "uniform", "clients_per_round": 5}},
        "fedavg": {"algorithm": {"name": f"{module}:ServerStep", "gamma": 0.8},
                   "sampler": {"name": "uniform", "clients_per_round": 5}},
        "fedpd": {"algorithm": {"name": f"{module}:CoinFedPD", "eta": 1.0, "p": 0.5}, "sampler": {"name": "all"}},
    }


@pytest.fixture(scope="session")
def user_algorithms(tmp_path_factory) -> tuple[Path, str]:
    """(a directory outside the repository, the name of the module of :data:`ALGORITHMS` in it)."""
    directory = tmp_path_factory.mktemp("user_code")
    return directory, write_module(directory, ALGORITHMS, "my_algorithms")
