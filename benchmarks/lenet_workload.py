"""The LeNet workload of benchmarks/parallel_clients.py and benchmarks/flower_lenet_app.py, in one
place both import (neither imports the other's module at import time): CIFAR-10 (3x32x32), 100
clients, 10 per round, 10 SGD steps of batch 50 each, FedAvg, float32; fedpd's config of it, the
clients' samples as fedpd splits them, fedpd's LeNet as a plain ``nn.Module`` and a client's
plain PyTorch local steps."""

from __future__ import annotations

CLIENTS, PER_ROUND, STEPS, BATCH, LR, SAMPLES = 100, 10, 10, 50, 0.01, 10_000


def lenet_config(rounds: int, workers: int) -> dict:
    return {"problem": {"name": "dataset", "dataset": "cifar10", "clients": CLIENTS, "partition": "iid",
                        "max_samples": SAMPLES, "max_test_samples": 100, "test": "pooled"},
            "model": {"name": "lenet"}, "algorithm": {"name": "fedavg"},
            "solver": {"name": "sgd", "lr": LR, "local_steps": STEPS, "batch_size": BATCH},
            "sampler": {"name": "uniform", "clients_per_round": PER_ROUND},
            "run": {"rounds": rounds, "eval_every": rounds, "seed": 0, "threads": 1, "workers": workers}}


def client_data():
    """Every client's CIFAR-10 samples, as fedpd's problem splits them (so all variants train on the same data)."""
    from fedpd.build import build_problem
    from fedpd.config import load_config

    split = build_problem(load_config(lenet_config(1, 1))).train
    return [(split.x[split.offsets[i]:split.offsets[i + 1]], split.y[split.offsets[i]:split.offsets[i + 1]])
            for i in range(CLIENTS)]


def lenet():
    import torch

    from fedpd.models import build_model

    torch.manual_seed(0)
    return build_model("lenet", input_shape=(3, 32, 32), num_classes=10)


def local_steps(net, opt, x, y, generator) -> None:
    import torch
    import torch.nn.functional as F

    for _ in range(STEPS):
        idx = torch.randint(len(y), (BATCH,), generator=generator)
        opt.zero_grad()
        F.cross_entropy(net(x[idx]), y[idx]).backward()
        opt.step()
