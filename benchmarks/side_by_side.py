"""fedpd against the loop a researcher writes by hand, on every model size.

One FedAvg workload — 10 clients per round, 20 SGD steps of batch 10 each, 200 samples per
client — three ways, on (a) logistic regression 784 -> 10, (b) MLP 784-200-200-10, (c) the
A-FedPD LeNet on 3x32x32, (d) ResNet-18 with GroupNorm on 3x32x32 (one round):

    fedpd     fedpd's in-process engine (as `fedpd run` builds it; run.client_chunk as chosen)
    plain     a plain per-client PyTorch loop: one reused nn.Module, torch.optim.SGD, the
              clients one after another, the server averaging their weights
    central   centralized SGD: one module, the same number of steps (10 x 20) on pooled data

Times are side by side in this process, alternating, median of --repeats (one torch thread); the
ratio column is the median of the repeats' own ratios (each repeat times the variants back to back).
Memory is each variant's peak resident memory in a child process of its own, above what the child
held before building it (so torch's own ~300 MB is not counted; its data, model and states are).

    python benchmarks/side_by_side.py [--models logistic,mlp,lenet,resnet18_gn] [--repeats 3]

--profile MODEL: where a round's time goes — fedpd's and the plain loop's rounds under cProfile, the
functions with the most own time (ms per round; torch's kernels show as their Python entry points).

--eval-memory: the evaluation's share instead. LeNet on 5 000 CIFAR-shaped samples (10 clients of
500), 5 rounds, peak memory of fedpd's rounds alone, of the rounds with an evaluation before and
after (train loss, its gradient, test metrics: fedpd.evaluation at automatic chunks, and at the
fixed 8 192-sample chunks it used before issue 21), and of the plain loop's rounds.

    python benchmarks/side_by_side.py --parallel   # run.workers on LeNet: benchmarks/parallel_clients.py

--step-ways MODEL: one local SGD step (batch 10) five ways, alternating, median of --repeats, as a
ratio to a plain step (`backward`, then each parameter's `add_`): the flat-buffer ways fedpd could
take and the one it takes (docs/decisions.md, "A neural local step").

--faults MODEL: page faults per round after a first, each variant in a child process: fedpd with
glibc malloc's default thresholds (FEDPD_MALLOC=default), fedpd as it runs (fedpd.allocator
keeps freed memory for the next step), the plain loop (docs/decisions.md, "A training process
keeps its freed memory").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F

from fedpd.algorithms.fedavg import FedAvg
from fedpd.build import PER_CLIENT_ABOVE
from fedpd.engine import InProcessEngine
from fedpd.flat import FlatModel
from fedpd.models import build_model
from fedpd.problems import losses
from fedpd.problems.base import ClientSplit, Problem
from fedpd.solvers import SGDSolver
from fedpd.store import MemoryStore

from fedpd.evaluation import evaluate

SHAPES = {"logistic": (784,), "mlp": (784,), "lenet": (3, 32, 32), "resnet18_gn": (3, 32, 32)}
ROUNDS = {"logistic": 5, "mlp": 3, "lenet": 2, "resnet18_gn": 1}
CLIENTS, STEPS, BATCH, SAMPLES, LR = 10, 20, 10, 200, 0.01


def data(model: str):
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(SAMPLES, *SHAPES[model], generator=g) for _ in range(CLIENTS)]
    ys = [torch.randint(0, 10, (SAMPLES,), generator=g) for _ in range(CLIENTS)]
    return xs, ys


def module(model: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(model, input_shape=SHAPES[model], num_classes=10)


class Fedpd:
    def __init__(self, model: str, chunk: int | None, execution: str = "auto"):
        xs, ys = data(model)
        split = ClientSplit.from_parts(xs, ys)
        flat = FlatModel(module(model))
        problem = Problem(model, split, ClientSplit.from_parts([x[:0] for x in xs], [y[:0] for y in ys]), flat,
                          losses.cross_entropy, flat.initial(torch.float32), classifies=True,
                          predict=losses.argmax_predict)
        problem.per_client = execution == "per_client" or (execution == "auto" and flat.dim > PER_CLIENT_ABOVE)
        if problem.per_client:
            chunk = 1  # as the engine does: one client at a time
        self.algorithm = FedAvg()
        self.server = self.algorithm.init_server(problem.x_init)
        store = MemoryStore(self.algorithm.init_client(problem.x_init), CLIENTS)
        self.engine = InProcessEngine(self.algorithm, problem, SGDSolver(lr=LR, local_steps=STEPS, batch_size=BATCH),
                                      store, seed=0, chunk=chunk)
        self.t = 0

    def round(self):
        self.server = self.engine.run_round(self.server, torch.arange(CLIENTS), self.t)
        self.t += 1


class Plain:
    def __init__(self, model: str):
        self.xs, self.ys = data(model)
        self.net = module(model)
        self.weights = {k: v.clone() for k, v in self.net.state_dict().items()}
        self.opt = torch.optim.SGD(self.net.parameters(), lr=LR)
        self.g = torch.Generator().manual_seed(1)

    def round(self):
        total = {k: torch.zeros_like(v) for k, v in self.weights.items()}
        for x, y in zip(self.xs, self.ys):
            self.net.load_state_dict(self.weights)
            for _ in range(STEPS):
                idx = torch.randint(SAMPLES, (BATCH,), generator=self.g)
                self.opt.zero_grad()
                F.cross_entropy(self.net(x[idx]), y[idx]).backward()
                self.opt.step()
            for k, v in self.net.state_dict().items():
                total[k] += v
        self.weights = {k: v / CLIENTS for k, v in total.items()}


class Central:
    def __init__(self, model: str):
        xs, ys = data(model)
        self.x, self.y = torch.cat(xs), torch.cat(ys)
        self.net = module(model)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=LR)
        self.g = torch.Generator().manual_seed(1)

    def round(self):
        for _ in range(CLIENTS * STEPS):
            idx = torch.randint(len(self.y), (BATCH,), generator=self.g)
            self.opt.zero_grad()
            F.cross_entropy(self.net(self.x[idx]), self.y[idx]).backward()
            self.opt.step()


EXECUTION = "auto"


class Evaluated(Fedpd):
    """fedpd's rounds with the metrics taken before the first and after the last (``batch``
    samples per evaluation chunk; 0: automatic)."""

    def __init__(self, model: str, chunk: int | None, batch: int):
        super().__init__(model, chunk, EXECUTION)
        self.batch = batch

    def evaluate(self):
        evaluate(self.engine.problem, self.server["x0"], batch=self.batch)


def make(variant: str, model: str, chunk: int | None):
    return {"fedpd": lambda: Fedpd(model, chunk, EXECUTION), "plain": lambda: Plain(model),
            "central": lambda: Central(model), "fedpd+eval": lambda: Evaluated(model, chunk, 0),
            "fedpd+eval8192": lambda: Evaluated(model, chunk, 8192)}[variant]()


def timed(runner, rounds: int) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        runner.round()
    return (time.perf_counter() - t0) / rounds


def profile(model: str, rounds: int, top: int = 14) -> None:
    """Own time per round of the functions fedpd's and the plain loop's rounds spend most in."""
    import cProfile
    import pstats

    own = {}
    for variant in ("fedpd", "plain"):
        runner = make(variant, model, None)
        runner.round()  # warm-up
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(rounds):
            runner.round()
        prof.disable()
        for (path, line, name), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():
            where = f"{os.path.basename(path)}:{name}" if line else name
            own.setdefault(where, {"fedpd": 0.0, "plain": 0.0})[variant] += tottime * 1e3 / rounds
    total = {v: sum(t[v] for t in own.values()) for v in ("fedpd", "plain")}
    print(f"{model}: ms per round (own time)   fedpd {total['fedpd']:.1f}   plain {total['plain']:.1f}")
    for where, t in sorted(own.items(), key=lambda kv: -max(kv[1].values()))[:top]:
        print(f"  {where[:60]:<60} {t['fedpd']:8.2f} {t['plain']:8.2f}")


def step_ways(model: str, repeats: int) -> None:
    """One SGD step on a fixed batch of 10, five ways, each on its own copy of the module."""
    x, y = data(model)[0][0][:BATCH], data(model)[1][0][:BATCH]
    nets = {}

    def bound(name: str):  # a module whose parameters are views of one flat vector
        net = module(model)
        params = list(net.parameters())
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        for p, v in zip(params, flat.split([p.numel() for p in params])):
            p.data = v.view(p.shape)
        nets[name] = (net, params, flat, [p.data for p in params], torch.zeros_like(flat))
        return nets[name]

    plain_net = module(model)
    plain_params = list(plain_net.parameters())

    def plain():
        for p in plain_params:
            p.grad = None
        F.cross_entropy(plain_net(x), y).backward()
        with torch.no_grad():
            for p in plain_params:
                p.add_(p.grad, alpha=-LR)

    net1, params1, flat1, _, buf1 = bound("grad views")
    for p, v in zip(params1, buf1.split([p.numel() for p in params1])):
        p.grad = v.view(p.shape)

    def grad_views():  # .grad views of a flat buffer: zero it, backward adds into it, flat update
        buf1.zero_()
        F.cross_entropy(net1(x), y).backward()
        flat1.add_(buf1, alpha=-LR)

    net2, params2, flat2, _, buf2 = bound("cat")

    def backward_cat():  # .grad unset, backward, one cat into a flat buffer, flat update
        for p in params2:
            p.grad = None
        F.cross_entropy(net2(x), y).backward()
        torch.cat([p.grad.reshape(-1) for p in params2], out=buf2)
        flat2.add_(buf2, alpha=-LR)

    net3, params3, _, views3, _ = bound("autograd.grad")

    def autograd_views():  # torch.autograd.grad, added into the flat vector's per-parameter views
        torch._foreach_add_(views3, torch.autograd.grad(F.cross_entropy(net3(x), y), params3), alpha=-LR)

    net4, params4, _, views4, _ = bound("fedpd")

    def backward_views():  # fedpd's plain step: .grad unset, backward, added into the views
        for p in params4:
            p.grad = None
        F.cross_entropy(net4(x), y).backward()
        torch._foreach_add_(views4, [p.grad for p in params4], alpha=-LR)

    ways = {
        "plain step": plain,
        ".grad views of a flat buffer": grad_views,
        "backward + cat + flat update": backward_cat,
        "autograd.grad + views": autograd_views,
        "backward + views (fedpd)": backward_views,
    }
    n = max(1, round(0.1 / timed_step(plain)))  # about 0.1 s per timing
    times = {k: [] for k in ways}
    for _ in range(repeats):
        for k, f in ways.items():
            times[k].append(timed_step(f, n))
    for k in ways:
        ratio = statistics.median(a / b for a, b in zip(times[k], times["plain step"]))
        print(f"{model}: {k:<30} {statistics.median(times[k]) * 1e3:9.3f} ms/step   / plain step {ratio:.3f}")


def timed_step(step, n: int = 3) -> float:
    step()  # warm-up
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t0) / n


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(variant: str, model: str, chunk: int | None, rounds: int) -> dict:
    """Peak memory of one variant above what the process held before building it (torch,
    imports): its data, model, states and the working memory of its rounds."""
    warm = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.GroupNorm(2, 4), torch.nn.Flatten(), torch.nn.LazyLinear(2)
    )
    F.cross_entropy(warm(torch.randn(2, 3, 8, 8)), torch.tensor([0, 1])).backward()  # load torch's kernels first
    before = resident_mb()
    peak = [before]
    done = threading.Event()

    def sample():  # ru_maxrss cannot be reset past the imports' own peak: sample instead
        while not done.is_set():
            peak[0] = max(peak[0], resident_mb())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    runner = make(variant, model, chunk)
    if isinstance(runner, Evaluated):
        runner.evaluate()
    runner.round()  # the first round (warm-up for the page faults and seconds of the others)
    faults, t0 = minor_faults(), time.perf_counter()
    for _ in range(rounds):
        runner.round()
    faults, seconds = (minor_faults() - faults) / rounds, (time.perf_counter() - t0) / rounds
    if isinstance(runner, Evaluated):
        runner.evaluate()
    done.set()
    sampler.join()
    return {"peak_mb": peak[0], "working_mb": peak[0] - before, "faults_per_round": faults, "s_per_round": seconds}


def minor_faults() -> int:
    """Pages this process has faulted in so far (a freed block used again after malloc returned
    it to the system faults each of its pages again)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def memory(variant: str, model: str, chunk: int | None, rounds: int, env: dict | None = None) -> dict:
    argv = [sys.executable, __file__, "--child", variant, "--models", model, "--chunk", str(chunk or 0),
            "--rounds", str(rounds), "--execution", EXECUTION, "--samples", str(SAMPLES)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def faults(model: str, rounds: int) -> None:
    """Page faults per round, each variant in a child process of its own: fedpd with glibc
    malloc's default thresholds, fedpd as it runs (fedpd.allocator), the plain loop."""
    for label, variant, env in (("fedpd, glibc's defaults", "fedpd", {"FEDPD_MALLOC": "default"}),
                                ("fedpd", "fedpd", {}), ("plain", "plain", {"FEDPD_MALLOC": "default"})):
        got = memory(variant, model, None, rounds, env)
        pages = got["faults_per_round"]
        print(
            f"{model}: {label:<24} {pages:10.0f} page faults per round "
            f"({pages * os.sysconf('SC_PAGE_SIZE') / 2**20:6.0f} MB)"
            f"   {got['s_per_round']:.3f} s/round   working MB {got['working_mb']:.0f}",
            flush=True,
        )
    # what a fault costs: a 40 MB block written 50 times, faulted in each time or reused
    for label, env in (("glibc's defaults", {"FEDPD_MALLOC": "default"}), ("fedpd.allocator", {})):
        out = subprocess.run([sys.executable, "-c", BLOCKS], capture_output=True, text=True, check=True,
                             env={**os.environ, **env})
        ms, pages = json.loads(out.stdout)
        print(f"a 40 MB block written, {label:<17} {ms:6.2f} ms  {pages:8.0f} page faults", flush=True)


BLOCKS = """
import json, resource, time, torch
from fedpd.allocator import keep_freed_memory
torch.set_num_threads(1)
keep_freed_memory()
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.ones(10 * 2**20)
f0, t0 = faults(), time.perf_counter()
for _ in range(50):
    block = torch.ones(10 * 2**20)
    del block
print(json.dumps([(time.perf_counter() - t0) / 50 * 1e3, (faults() - f0) / 50]))
"""


def main() -> None:
    global EXECUTION, SAMPLES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="logistic,mlp,lenet,resnet18_gn")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=-1, help="run.client_chunk for fedpd (0: all; -1: the engine's rule)")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per timing (default per model)")
    ap.add_argument("--memory", action="store_true", help="also measure memory (child processes)")
    ap.add_argument("--execution", default="auto", choices=("auto", "vectorised", "per_client"),
                    help="fedpd's run.execution")
    ap.add_argument("--eval-memory", action="store_true", help="the evaluation's memory (LeNet, 5 000 samples)")
    ap.add_argument("--profile", help="MODEL: where the round's time goes (cProfile)")
    ap.add_argument("--step-ways", help="MODEL: one local step, the ways fedpd could take it")
    ap.add_argument("--faults", help="MODEL: page faults per round (fedpd with and without fedpd.allocator, plain)")
    ap.add_argument("--samples", type=int, default=SAMPLES, help=argparse.SUPPRESS)
    ap.add_argument("--parallel", action="store_true", help="instead: the LeNet workload with run.workers 1 and 2 "
                    "against the plain loop and Flower's 2 actors (benchmarks/parallel_clients.py, needs CIFAR-10)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.parallel:
        import parallel_clients  # beside this script

        parallel_clients.main(["--repeats", str(args.repeats), "--rounds", str(args.rounds or 6),
                               *(["--memory"] if args.memory else [])])
        return
    torch.set_num_threads(1)
    EXECUTION, SAMPLES = args.execution, args.samples
    chunk = None if args.chunk == 0 else (args.chunk if args.chunk > 0 else "auto")
    if args.child:
        c = None if chunk in (None, "auto") else chunk
        print(json.dumps(child(args.child, args.models, c, args.rounds or 1)))
        return
    if args.profile:
        profile(args.profile, args.rounds or ROUNDS[args.profile])
        return
    if args.step_ways:
        step_ways(args.step_ways, args.repeats)
        return
    if args.faults:
        faults(args.faults, args.rounds or ROUNDS[args.faults])
        return
    if args.eval_memory:
        SAMPLES = 500
        mem = {v: memory(v, "lenet", None, 4) for v in ("fedpd", "fedpd+eval", "fedpd+eval8192", "plain")}
        print(
            "lenet, 5 000 samples, 5 rounds: peak working MB "
            + "  ".join(f"{v} {m['working_mb']:.0f}" for v, m in mem.items()),
            flush=True,
        )
        return
    for model in args.models.split(","):
        rounds = args.rounds or ROUNDS[model]
        c = None if chunk in (None, "auto") else chunk
        runners = {v: make(v, model, c) for v in ("fedpd", "plain", "central")}
        times = {v: [] for v in runners}
        for r in runners.values():
            r.round()  # warm-up
        for _ in range(args.repeats):
            for v, r in runners.items():
                times[v].append(timed(r, rounds))
        med = {v: statistics.median(t) for v, t in times.items()}
        ratio = {v: statistics.median(a / b for a, b in zip(times["fedpd"], times[v])) for v in ("plain", "central")}
        line = (
            f"{model:>12}: s/round fedpd {med['fedpd']:.4f}  plain {med['plain']:.4f}  central {med['central']:.4f}"
            f"  | fedpd/plain {ratio['plain']:.2f} "
            f"(repeats {', '.join(f'{a / b:.2f}' for a, b in zip(times['fedpd'], times['plain']))})"
            f"  fedpd/central {ratio['central']:.2f}"
        )
        if args.memory:
            mem = {v: memory(v, model, c, rounds) for v in runners}
            line += "  | working MB " + "  ".join(f"{v} {m['working_mb']:.0f}" for v, m in mem.items())
            line += f"  fedpd/plain {mem['fedpd']['working_mb'] / max(mem['plain']['working_mb'], 1):.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
