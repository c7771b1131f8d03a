"""A plain Flower FedAvg app for benchmarks/parallel_clients.py: the LeNet workload as a Flower user
would write it, with Flower's own ``FedAvg`` strategy and a torch ``ClientApp``.

Each virtual node is one of the 100 clients of the benchmark's CIFAR-10 split (the same samples
fedpd trains on, read once per Ray actor) and trains fedpd's LeNet ``nn.Module`` with
``torch.optim.SGD`` for 10 minibatches of 50; the server averages by ``num-examples``.
``simulate()`` runs it on Flower's simulation runtime with ``actors`` Ray actors (one CPU and
one torch thread each) and returns the seconds of each round, measured in the ServerApp.
"""

from __future__ import annotations

import logging
import time

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

import parallel_clients as bench

SETTINGS: dict = {}  # filled by simulate(); the ServerApp runs in this process's thread
_DATA: list = []  # the clients' samples, loaded once per actor

client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    if not _DATA:
        _DATA.extend(bench.client_data())
    x, y = _DATA[int(context.node_config["partition-id"])]
    net = bench.lenet()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    opt = torch.optim.SGD(net.parameters(), lr=bench.LR)
    bench.local_steps(net, opt, x, y, torch.Generator().manual_seed(int(context.node_config["partition-id"])))
    reply = RecordDict({"arrays": ArrayRecord(net.state_dict()),
                        "metrics": MetricRecord({"num-examples": bench.STEPS * bench.BATCH})})
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
    strategy.start(grid=grid, initial_arrays=ArrayRecord(bench.lenet().state_dict()), num_rounds=s["rounds"],
                   train_config=ConfigRecord({}), evaluate_fn=evaluate)
    s["stamps"] = [b - a for a, b in zip(stamps, stamps[1:])]


def simulate(*, clients: int, per_round: int, rounds: int, actors: int) -> list[float]:
    from flwr.simulation import run_simulation

    SETTINGS.update(clients=clients, per_round=per_round, rounds=rounds)
    logging.getLogger("flwr").setLevel(logging.ERROR)
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"address": "local", "num_cpus": actors, "include_dashboard": False,
                                                 "logging_level": logging.ERROR, "log_to_driver": False}})
    return SETTINGS["stamps"]
