"""A plain Flower FedAvg app for benchmarks/flower_overhead.py and benchmarks/deployment_rounds.py:
what a Flower user would write for the W1 workload, with Flower's own ``FedAvg`` strategy and a
torch ``ClientApp``.

Each node holds ``steps * batch`` synthetic samples (784 features, 10 classes, seeded by its
partition id) and trains ``torch.nn.Linear(784, 10)`` with ``torch.optim.SGD`` for ``steps``
minibatches of ``batch``; the server averages by ``num-examples``. ``simulate()`` returns the
seconds of each round, measured in the ServerApp (benchmarks/flower_lenet_app.py runs it with its own
ClientApp). ``deploy_app`` is the same server for a deployment (``write_app`` makes the app
directory ``flwr run`` packs; its run config gives the rounds, the training settings and the file
the seconds of each round go to); ``fast_pull = true`` gives the strategy a grid that pulls the
replies every 10 ms instead of Flower's 3 s.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

IN, OUT = 784, 10
SETTINGS: dict = {}  # filled by simulate(); the ServerApp runs in this process's thread

client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    config = msg.content["config"]
    steps, batch, lr = int(config["steps"]), int(config["batch"]), float(config["lr"])
    rng = np.random.default_rng(int(context.node_config["partition-id"]))
    x = torch.from_numpy(rng.standard_normal((steps * batch, IN)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, OUT, steps * batch))
    model = torch.nn.Linear(IN, OUT)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    optimiser = torch.optim.SGD(model.parameters(), lr=lr)
    for s in range(steps):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(model(x[s * batch:(s + 1) * batch]), y[s * batch:(s + 1) * batch]).backward()
        optimiser.step()
    reply = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                        "metrics": MetricRecord({"num-examples": steps * batch})})
    return Message(reply, reply_to=msg)


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    from flwr.app import ConfigRecord

    s = SETTINGS
    stamps: list[float] = []

    def evaluate(server_round: int, arrays: ArrayRecord):  # called before round 1 and after each round
        stamps.append(time.perf_counter())
        return None

    strategy = FedAvg(fraction_train=s["per_round"] / s["clients"], fraction_evaluate=0.0,
                      min_train_nodes=s["per_round"], min_evaluate_nodes=0, min_available_nodes=s["clients"])
    strategy.start(grid=grid, initial_arrays=ArrayRecord(s["initial"]), num_rounds=s["rounds"],
                   train_config=ConfigRecord(s["train_config"]), evaluate_fn=evaluate)
    s["stamps"] = [b - a for a, b in zip(stamps, stamps[1:])]


def simulate(*, clients: int, per_round: int, steps: int = 0, batch: int = 0, lr: float = 0.0, rounds: int,
             cpus: int, client: ClientApp = client_app, initial: dict | None = None) -> list[float]:
    """The seconds of each round of FedAvg on ``clients`` virtual nodes running ``client`` (default
    the W1 ClientApp above, with ``steps``, ``batch``, ``lr``), ``cpus`` Ray actors, starting from
    the state dict ``initial`` (default a seeded ``Linear(784, 10)``)."""
    from flwr.simulation import run_simulation

    if initial is None:
        torch.manual_seed(0)
        initial = torch.nn.Linear(IN, OUT).state_dict()
    SETTINGS.update(clients=clients, per_round=per_round, rounds=rounds, initial=initial,
                    train_config={"steps": steps, "batch": batch, "lr": lr})
    logging.getLogger("flwr").setLevel(logging.ERROR)
    run_simulation(server_app=server_app, client_app=client, num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"address": "local", "num_cpus": cpus, "include_dashboard": False,
                                                 "logging_level": logging.ERROR, "log_to_driver": False}})
    return SETTINGS["stamps"]


deploy_app = ServerApp()


class FastPull:
    """A Grid whose ``send_and_receive`` pulls every 10 ms (Flower's deployment grid sleeps 3 s)."""

    def __init__(self, grid: Grid):
        self.grid = grid

    def __getattr__(self, name):
        return getattr(self.grid, name)

    def send_and_receive(self, messages, *, timeout=None):
        ids = {i for i in self.grid.push_messages(list(messages)) if i}
        end, out = time.time() + (timeout if timeout is not None else 1e9), []
        while ids and time.time() < end:
            got = list(self.grid.pull_messages(ids))
            out += got
            ids -= {m.metadata.reply_to_message_id for m in got}
            if ids:
                time.sleep(0.01)
        return out


@deploy_app.main()
def deploy_main(grid: Grid, context: Context) -> None:
    import json
    from pathlib import Path

    from flwr.app import ConfigRecord

    rc = dict(context.run_config)
    nodes, stamps = int(rc["nodes"]), []
    torch.manual_seed(0)
    initial = torch.nn.Linear(IN, OUT).state_dict()

    def evaluate(server_round: int, arrays: ArrayRecord):  # before round 1 and after each round
        stamps.append(time.perf_counter())
        return None

    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=nodes, min_evaluate_nodes=0,
                      min_available_nodes=nodes)
    strategy.start(grid=FastPull(grid) if rc.get("fast-pull") else grid, initial_arrays=ArrayRecord(initial),
                   num_rounds=int(rc["rounds"]), evaluate_fn=evaluate,
                   train_config=ConfigRecord({"steps": int(rc["steps"]), "batch": int(rc["batch"]),
                                              "lr": float(rc["lr"])}))
    Path(str(rc["stamps"])).write_text(json.dumps([b - a for a, b in zip(stamps, stamps[1:])]))


def write_app(folder, *, nodes: int, rounds: int, steps: int, batch: int, lr: float, stamps, fast_pull: bool) -> None:
    """The app directory of ``deploy_app`` and ``client_app`` (this file, and its pyproject.toml)."""
    import shutil
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(__file__, folder / "flower_plain_app.py")
    (folder / "pyproject.toml").write_text(f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "plain-fedavg"
version = "1.0.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "bench"

[tool.flwr.app.components]
serverapp = "flower_plain_app:deploy_app"
clientapp = "flower_plain_app:client_app"

[tool.flwr.app.config]
nodes = {nodes}
rounds = {rounds}
steps = {steps}
batch = {batch}
lr = {lr}
stamps = "{stamps}"
fast-pull = {str(fast_pull).lower()}
""")
