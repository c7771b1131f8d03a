"""The runs the resume tests kill with SIGKILL and resume (tests/run/test_resume.py; the worker
processes' resume, tests/engines/test_workers.py): their configs, the kill once a checkpoint and some
metrics are written, and the metrics to compare (wall_s aside)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

CONFIGS = {
    # FedPD's coin flips, minibatch SGD and stragglers all draw from the checkpointed streams
    "fedpd": """
[problem]
name = "fedpd_logreg"
clients = 20
samples_per_client = 50
[algorithm]
name = "fedpd"
eta = 1.0
p = 0.5
[solver]
name = "sgd"
lr = 0.1
local_steps = 10
batch_size = 5
straggler_fraction = 0.3
[run]
rounds = 400
eval_every = 7
checkpoint_every = 5
""",
    "scaffold": """
[problem]
name = "synthetic"
clients = 20
max_client_samples = 100
[algorithm]
name = "scaffold"
[solver]
name = "sgd"
lr = 0.05
local_steps = 10
batch_size = 5
momentum = 0.5
[sampler]
name = "uniform"
clients_per_round = 5
[run]
rounds = 400
eval_every = 7
checkpoint_every = 5
seed = 3
""",
}


# FedBuff on a fleet that comes and goes: the clock, the availability chains, the clients in
# flight with their uploads and start versions, and the buffer are all in the checkpoint
CONFIGS["fedbuff-fleet"] = """
[problem]
name = "synthetic"
clients = 20
max_client_samples = 100
[algorithm]
name = "fedavgm"
[solver]
name = "sgd"
lr = 0.05
local_steps = 5
batch_size = 5
[system]
speed = { dist = "lognormal", median = 1e5, sigma = 1.0 }
availability = "markov"
mean_on_s = 20.0
mean_off_s = 5.0
[asynchronous]
concurrency = 6
buffer = 3
[run]
rounds = 400
eval_every = 7
checkpoint_every = 5
"""


# the same with the clients' states in the disk store (rows overwritten every round,
# so the kills land while undo logs are being written and dropped)
CONFIGS["fedpd-disk"] = CONFIGS["fedpd"] + 'store = "disk"\n'


def metrics_without_wall(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        r.pop("wall_s")
    return records


def kill_when(out: Path, min_checkpoint_lines: int, proc: subprocess.Popen) -> None:
    """SIGKILL the run once some metrics are written after a checkpoint exists."""
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        metrics = out / "metrics.jsonl"
        if ((out / "checkpoint.pt").exists() and metrics.exists()
                and len(metrics.read_text().splitlines()) >= min_checkpoint_lines):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
