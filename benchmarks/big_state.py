"""40 GB of client state on a 24 GiB machine: 10⁴ clients each holding a 10⁶-float dual (issue 14).

FedDyn (client state: its dual λ_i, d floats) on Synthetic(1, 1) with 99 999 features and 10
classes, so d = 100 000 · 10 = 10⁶, in float32: 4 MB per client, 40 GB for 10⁴ clients. Each
client holds 2 samples (``max_client_samples = 2``), generated on demand; 100 participants per
round in chunks of 10 (``run.client_chunk``), 2 local SGD steps of batch 2.

The run goes through ``fedpd.run`` with a run directory: the disk store with its undo logs,
checkpoints every ``--checkpoint-every`` rounds, ``metrics.jsonl``. The first 100 rounds take the
clients in order (round t: clients 100t … 100t + 99; the one departure from a plain run, so that
every client's 4 MB row exists after 100 rounds: uniform sampling would need ~900 rounds to
reach them all), then ``--extra`` rounds of uniform sampling overwrite stored rows (undo logs).
Metrics at round 0 and at the end over ``run.eval_clients = 100`` clients.

Reports seconds per round, the store's size on disk, the checkpoint's size and the peak
resident memory of the process (``ru_maxrss``; page cache is not resident memory of the
process). Needs about 45 GB free in ``--dir``.

    python benchmarks/big_state.py --dir /path/with/50GB [--clients 10000] [--dim 1000000]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

import torch

import fedpd
from fedpd.simulation import Simulation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=1_000_000, help="d = (features + 1) * 10 classes")
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--extra", type=int, default=10, help="uniformly sampled rounds after the sweep")
    ap.add_argument("--checkpoint-every", type=int, default=10)
    ap.add_argument("--dir", default=None, help="where the run directory (and its store) lives")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    args = ap.parse_args()
    features = args.dim // 10 - 1
    sweep = -(-args.clients // args.per_round)
    rounds = sweep + args.extra
    cfg = {"problem": {"name": "synthetic", "clients": args.clients, "dim": features, "classes": 10,
                       "max_client_samples": 2, "seed": 0},
           "algorithm": {"name": "feddyn", "eta": 10.0},
           "solver": {"name": "sgd", "lr": 1e-6, "local_steps": 2, "batch_size": 2},
           "sampler": {"name": "uniform", "clients_per_round": args.per_round},
           "run": {"rounds": rounds, "eval_every": rounds, "checkpoint_every": args.checkpoint_every,
                   "eval_clients": 100, "client_chunk": 10, "dtype": "float32", "store": "disk", "seed": 0}}

    draw = Simulation.participants
    times: list[float] = []

    def participants(self, round):
        times.append(time.perf_counter())
        if round < sweep:  # every client once, in order
            return torch.arange(round * args.per_round, min((round + 1) * args.per_round, args.clients))
        return draw(self, round)

    Simulation.participants = participants
    root = Path(tempfile.mkdtemp(prefix="fedpd-big-", dir=args.dir))
    out = root / "run"
    try:
        t0 = time.perf_counter()
        result = fedpd.run(cfg, out)
        wall = time.perf_counter() - t0
        times.append(time.perf_counter())
        store = result.simulation.store
        per_round = [b - a for a, b in zip(times[:-1], times[1:])]  # includes checkpoints; evaluation at 0 and T
        store_bytes = sum(p.stat().st_size for p in (out / "store").iterdir())
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        d = result.simulation.problem.dim
        print(f"clients {args.clients}, d = {d}, float32: state {args.clients * d * 4 / 1e9:.1f} GB; {rounds} rounds "
              f"({sweep} sweeping, {args.extra} uniform), {args.per_round} per round, chunks of 10")
        print(f"clients stored: {len(store)}; store on disk: {store_bytes / 1e9:.2f} GB; checkpoint.pt: "
              f"{(out / 'checkpoint.pt').stat().st_size / 1e6:.1f} MB")
        print(f"wall {wall:.0f} s; s/round median {sorted(per_round)[len(per_round) // 2]:.2f} (rounds 1..T-1, with "
              f"checkpoints); peak RSS {rss / 2**30:.2f} GiB")
        print(f"metrics: round {history[0]['round']} train_loss {history[0]['train_loss']:.4f} -> round "
              f"{history[-1]['round']} train_loss {history[-1]['train_loss']:.4f} (eval_clients "
              f"{history[-1].get('eval_clients')})")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
