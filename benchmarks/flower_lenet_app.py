"""A plain Flower FedAvg app for benchmarks/parallel_clients.py: the LeNet workload
(benchmarks/lenet_workload.py) as a Flower user would write it, with Flower's own ``FedAvg``
strategy and a torch ``ClientApp``.

Each virtual node is one of the 100 clients of the benchmark's CIFAR-10 split (the same samples
fedpd trains on, read once per Ray actor) and trains fedpd's LeNet ``nn.Module`` with
``torch.optim.SGD`` for 10 minibatches of 50; the server (flower_plain_app's ServerApp, Flower's
``FedAvg``) averages by ``num-examples``. ``simulate()`` runs it on Flower's simulation runtime
with ``actors`` Ray actors (one CPU and one torch thread each) and returns the seconds of each
round, measured in the ServerApp.
"""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

import flower_plain_app
import lenet_workload as bench

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


def simulate(*, clients: int, per_round: int, rounds: int, actors: int) -> list[float]:
    """The seconds of each round, on ``actors`` Ray actors (flower_plain_app's ServerApp: FedAvg)."""
    return flower_plain_app.simulate(clients=clients, per_round=per_round, rounds=rounds, cpus=actors,
                                     client=client_app, initial=bench.lenet().state_dict())
