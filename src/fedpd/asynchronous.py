"""The asynchronous server: FedAsync and FedBuff on the fleet's clock (``[asynchronous]``).

Up to C clients (``concurrency``) train at once, each from the server model of the version it
downloaded; a client's upload arrives when the fleet's clock (:mod:`fedpd.system`) says, and the
server applies it with a weight s(τ) of its staleness τ = (server updates since its download):

* **FedAsync** (Xie, Koyejo, Gupta, "Asynchronous federated optimization", arXiv 1903.03934, 2019,
  Alg. 1): every arrival is one update, x_t = (1 − α_t) x_{t−1} + α_t x_k with α_t = α s(τ). Its
  local problem, f_k(x) + (ρ/2)‖x − x_τ‖², is FedProx's local objective (μ = ρ).
* **FedBuff** (Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, "Federated learning with
  buffered asynchronous aggregation", AISTATS 2022, Alg. 1): each arrival adds s(τ) Δ_k,
  Δ_k = x_τ − x_k (its start model less its end model), to a buffer; after K (``buffer``) the
  server steps x ← x − η_g · buffer / K (η_g: ``server_lr``) and empties it.

Staleness functions (Xie et al. §5.2): constant s = 1; polynomial s(τ) = (τ + 1)^(−a); hinge
s(τ) = 1 if τ ≤ b, else 1 / (a(τ − b) + 1). FedBuff's s(τ) = 1/√(1 + τ) is polynomial with a = ½.

Either way the server hands the algorithm's own server step (``aggregate_means``) the one mean
model x̄ it computed — FedAsync's mix, or x − η_g·buffer/K — so FedAvg takes x̄ as it is and the
FedOpt family (FedAvgM, FedAdam, …) takes its optimiser step on the buffered update x̄ − x, which
is FedBuff's server optimiser (their §3: "server optimizer ... e.g. SGD with momentum, Adam").
Which algorithms run so: those whose clients keep no state, upload their model x and whose server
step reads only the uploads' mean model (FedAvg, FedProx, FedSAM, FedAvgM, FedAdagrad, FedAdam,
FedYogi). A primal-dual rule keeps per-client duals updated against the model the client trained
from and a server state that assumes a round's participants answer together (FedDyn's h, A-FedPD's
virtual duals): under staleness those are not the paper's quantities, so they are refused.

Determinism: events are ordered by (arrival tick, client id, dispatch sequence); a freed slot is
refilled at once with a client drawn uniformly from the idle available ones, from the server's
stream ("asynchronous", dispatch number). A client's streams are keyed by the version it starts
from (their round; a client sent one version again gets the label version + r·2³², its r-th
repeat), so the clients that start from one version train in one vectorised call: training waits
until an arrival time is needed — until the earliest known arrival is not before the earliest a
waiting client could arrive (its download and upload, and the fewest sample gradients its solver can
count, :func:`work_bound`) — and the result does not depend on how they were grouped (the engine
contract). Where that count is exact (FedAvg's own local rule on plain GD or SGD:
:func:`exact_work`), every arrival time is known when the client is sent, and a client trains only
when the server reads its upload — FedBuff's K uploads of an update then train together, one call
per start version. An asynchronous run counts a client's sample gradients when it trains. A
checkpoint holds the clients in flight and in the buffer (the trained ones with their uploads),
their start versions and the clock, so a resume continues the same event sequence.
"""

from __future__ import annotations

import heapq
import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import Tensor

from fedpd.algorithms.base import sq_dist
from fedpd.comm import WORK
from fedpd.context import ServerContext
from fedpd.errors import ConfigError
from fedpd.options import Options, refuse
from fedpd.sampling import UniformK
from fedpd.streams import server_generator

#: the options each server reads (another set by the user is refused: it would be ignored)
OWN = {"fedbuff": {"buffer", "server_lr"}, "fedasync": {"alpha"}}
STALENESS_OWN = {"constant": set(), "polynomial": {"a"}, "hinge": {"a", "b"}}


class AsynchronousOptions(Options):
    name: Literal["fedbuff", "fedasync"] = Field("fedbuff", description="fedbuff (Nguyen et al. 2022) or fedasync "
                                                 "(Xie et al. 2019)")
    concurrency: int = Field(10, ge=1, le=1_000_000, description="C: clients training at once")
    buffer: int = Field(10, ge=1, le=1_000_000, description="fedbuff: K, the uploads per server update")
    server_lr: float = Field(1.0, gt=0, description="fedbuff: η_g, the server step on the buffer's mean")
    alpha: float = Field(0.6, gt=0, le=1, description="fedasync: α, the mixing weight before staleness")
    staleness: Literal["constant", "polynomial", "hinge"] = Field(
        "polynomial", description="s(τ): constant 1, polynomial (τ + 1)^-a, hinge (1 if τ <= b else 1/(a(τ - b) + 1))")
    a: float = Field(0.5, ge=0, le=100, description="polynomial and hinge: a (0.5 with polynomial: FedBuff's "
                     "1/sqrt(1 + τ))")
    b: float = Field(4.0, ge=0, description="hinge: b, the staleness that is not discounted")

    @model_validator(mode="after")
    def _no_ignored_option(self):
        given = set(self.given(*type(self).model_fields))
        for server, keys in OWN.items():
            for key in sorted(keys & given):
                if self.name != server:
                    raise refuse(key, f"is {server}'s option; name = \"{self.name}\" does not read it")
        for key in sorted({"a", "b"} & given - STALENESS_OWN[self.staleness]):
            raise refuse(key, f"staleness = \"{self.staleness}\" does not read it")
        if self.name == "fedbuff" and self.buffer > self.concurrency:
            raise refuse("buffer", f"K = {self.buffer} uploads per update with C = {self.concurrency} clients in "
                         f"flight (allowed: at most concurrency)")
        return self

    def weight(self, tau: int) -> float:
        """s(τ)."""
        if self.staleness == "constant":
            return 1.0
        if self.staleness == "polynomial":
            return (tau + 1.0) ** (-self.a)
        return 1.0 if tau <= self.b else 1.0 / (self.a * (tau - self.b) + 1.0)


def build_asynchronous(cfg, problem, algorithm, solver, fleet) -> "AsyncServer | None":
    """The asynchronous server of ``[asynchronous]`` (None: synchronous rounds), refused in one line
    for what it cannot run."""
    opts = cfg.asynchronous
    if opts is None:
        return None
    if fleet is None:
        raise ConfigError("asynchronous: needs the clock of a [system] section (when uploads arrive) (allowed: add "
                          "[system], or no [asynchronous])")
    name = cfg.names["algorithm"]
    why = _cannot_run(algorithm, problem.x_init)
    if why:
        raise ConfigError(f"algorithm.name: '{name}' cannot run asynchronously: {why} (allowed: fedavg, fedprox, "
                          f"fedsam, fedavgm, fedadagrad, fedadam, fedyogi — FedAvg-style local training)")
    if cfg.names["sampler"] != "all":
        raise ConfigError(f"sampler.name: '{cfg.names['sampler']}' is not used: the asynchronous server draws each new "
                          f"client uniformly from the idle available ones (allowed: no [sampler] with [asynchronous])")
    if cfg.options["privacy"].clip != "none":
        raise ConfigError("privacy: differential privacy's accountant counts synchronous rounds (allowed: no "
                          "[privacy] with [asynchronous])")
    if cfg.names["attack"] != "none":
        raise ConfigError("attack: attacks act on a synchronous round's uploads (allowed: no [attack] with "
                          "[asynchronous])")
    if getattr(cfg.options["solver"], "lr_decay", 1.0) != 1.0:
        raise ConfigError("solver.lr_decay: decays the step size per round, and an asynchronous run has none "
                          "(allowed: 1.0 with [asynchronous])")
    if opts.concurrency > problem.num_clients:
        raise ConfigError(f"asynchronous.concurrency: {opts.concurrency} clients in flight of {problem.num_clients} "
                          f"(allowed: at most the problem's clients)")
    return AsyncServer(opts, algorithm, fleet, problem, solver, cfg.run.seed)


def _cannot_run(algorithm, x0: Tensor) -> str:
    """Why ``algorithm`` cannot run on the asynchronous server ("" when it can)."""
    from fedpd.algorithms.base import Algorithm, streams_means

    if algorithm.participation != "sampled":
        return "it takes every client every round"
    if algorithm.init_client(x0):
        return "its clients keep a state updated against the model they trained from"
    if type(algorithm).communicates is not Algorithm.communicates:
        return "it decides per round whether clients upload"
    if not streams_means(algorithm):
        return "its server step reads every upload, not their mean model (a robust aggregator, weights)"
    terms = algorithm.mean_terms({"x0": x0}, {"x": x0.unsqueeze(0)})
    if set(terms) != {"x", "primal_residual"}:
        return "its server step reads more than the mean model of the uploads"
    return ""


def work_bound(solver, sizes: np.ndarray) -> np.ndarray:
    """The fewest sample gradients a client of each size in ``sizes`` can count in one local solve
    (fedpd's gradient solvers: its fewest steps × its batch, or its n_k for full batches); 0 for
    any other solver. A lower bound: it decides when training may wait."""
    steps = getattr(solver, "local_steps", None)
    if steps is None or not hasattr(solver, "step_counts"):
        return np.zeros(sizes.size)
    batch = getattr(solver, "batch_size", None)
    if getattr(solver, "straggler_fraction", 0.0) > 0:
        steps = np.ones(sizes.size)
    elif getattr(solver, "local_epochs", 0):
        steps = solver.local_epochs * np.maximum(1, -(-sizes // batch))
    else:
        steps = np.full(sizes.size, float(steps))
    return steps * (float(batch) if batch else sizes.astype(np.float64))


def exact_work(algorithm, solver) -> bool:
    """Whether :func:`work_bound` is the exact count: FedAvg's own local rule (FedProx's and the
    FedOpt family's are it) on fedpd's GD or SGD with every client taking its steps — no
    stragglers, no SAM (a second gradient per step), no stopping criterion."""
    from fedpd.algorithms.fedavg import FedAvg
    from fedpd.solvers import GradientSolver, SGDSolver

    return (type(algorithm).local is FedAvg.local and type(solver) in (GradientSolver, SGDSolver)
            and not solver.straggler_fraction and not solver.sam_radius)


def _idle_draw(on: np.ndarray, busy: set[int], k: int, g: torch.Generator) -> np.ndarray:
    """Up to ``k`` of the clients that are available (``on``) and not ``busy``, uniformly without
    replacement, ascending: by rejection from all N while few are asked of many (O(k), as the
    sampler draws), else from the list of the idle ones (O(N))."""
    n = on.size
    if k * 20 <= n:
        chosen: dict[int, None] = {}
        for _ in range(20):  # enough tries unless few are idle; then the list below
            for i in torch.randint(n, (k,), generator=g).tolist():
                if len(chosen) < k and on[i] and i not in busy:
                    chosen.setdefault(i)
            if len(chosen) == k:
                return np.array(sorted(chosen), dtype=np.int64)
    idle = np.flatnonzero(on)
    idle = idle[~np.isin(idle, np.fromiter(busy, dtype=np.int64, count=len(busy)))] if busy else idle
    if not idle.size:
        return idle
    return idle[UniformK(idle.size, min(k, idle.size)).sample(0, g).numpy()]


class AsyncServer:
    """The event loop (module docstring). ``step`` runs events until the next server update.

    A client in flight is an entry: its ``client``, start ``version``, stream ``label``, when its
    model arrived (``model_at``), the end of its available period (``until``), the earliest it
    could arrive (``earliest``), once known its ``arrival`` and ``lost``, and once trained its
    upload ``x`` and ``residual`` ‖x − x_τ‖²."""

    def __init__(self, opts: AsynchronousOptions, algorithm, fleet, problem, solver, seed: int):
        self.opts, self.algorithm, self.fleet = opts, algorithm, fleet
        self.num_clients, self.seed = problem.num_clients, seed
        self.sizes = problem.train.sizes.cpu().numpy()
        self.work = work_bound(solver, self.sizes)
        self.exact = exact_work(algorithm, solver)
        model = problem.x_init
        self.upload_bytes = model.numel() * (fleet.opts.bytes_per_float or model.element_size())
        self.dispatches = 0  # dispatch calls so far: each one's draw
        self.sequence = 0  # clients sent so far: the events' last tie-break
        self.events: list[tuple[int, int, int]] = []  # heap of (arrival tick, client, sequence)
        self.flight: dict[int, dict] = {}  # sequence -> a client in flight (or arrived, in the buffer)
        self.buffered: list[int] = []  # sequences of the arrived uploads the next update reads, in arrival order
        self.messages: dict[int, dict] = {}  # version -> the message clients downloaded then
        self.sent: dict[int, dict[int, int]] = {}  # version -> {client: how often it was sent it}
        self.staleness = math.nan  # the mean τ of the last update's uploads

    # --- the loop ------------------------------------------------------------------------------
    def step(self, server, engine, version: int):
        """Events until one server update; returns the new server state (version ``version`` + 1)."""
        comm = engine.comm
        while True:
            self._fill(server, engine, version)
            unknown = [s for s, e in self.flight.items() if "arrival" not in e]
            if unknown and (not self.events or self.events[0][0] >= min(self.flight[s]["earliest"] for s in unknown)):
                self._train(engine, unknown)
                continue
            if not self.events:
                self._wait_for_a_client()
                continue
            arrival, _, seq = heapq.heappop(self.events)
            self.fleet.now = arrival
            entry = self.flight[seq]
            if entry["lost"]:  # its available period ended before the upload arrived
                self._train(engine, [seq])  # (it computed all the same: its sample gradients count)
                del self.flight[seq]
                comm.dropouts += 1
                continue
            comm.up({"x": self.messages[entry["version"]]["x0"].unsqueeze(0)})  # one model up
            entry["tau"] = version - entry["version"]
            self.buffered.append(seq)
            if len(self.buffered) < (1 if self.opts.name == "fedasync" else self.opts.buffer):
                continue
            self._train(engine, self.buffered)
            rejected = [s for s in self.buffered if not bool(torch.isfinite(self.flight[s]["x"]).all())]
            for s in rejected:
                self.buffered.remove(s)
                del self.flight[s]
            comm.rejected_uploads += len(rejected)
            if len(self.buffered) == (1 if self.opts.name == "fedasync" else self.opts.buffer):
                return self._apply(server, version, comm)

    def _apply(self, server, version: int, comm):
        """The server update from the buffered uploads (FedAsync: the one), then forget them."""
        from fedpd.protocol import server_step

        entries = [self.flight.pop(s) for s in self.buffered]
        self.buffered = []
        x0 = server["x0"]
        weights = [self.opts.weight(e["tau"]) for e in entries]
        if self.opts.name == "fedasync":
            a = self.opts.alpha * weights[0]
            x_bar = (1 - a) * x0 + a * entries[0]["x"]
        else:
            total = None
            for w, e in zip(weights, entries):  # in arrival order: the sum's order is the events'
                delta = w * (self.messages[e["version"]]["x0"] - e["x"])
                total = delta if total is None else total + delta
            x_bar = x0 - self.opts.server_lr * total / len(entries)
        residual = torch.tensor(sum(e["residual"] for e in entries) / len(entries), dtype=x0.dtype, device=x0.device)
        ids = torch.tensor(sorted(e["client"] for e in entries), dtype=torch.int64)
        server, _ = server_step(self.algorithm, "aggregate_means", server, {"x": x_bar, "primal_residual": residual},
                                ServerContext(ids, version, self.num_clients, self.seed))
        self.staleness = sum(e["tau"] for e in entries) / len(entries)
        comm.end_round()
        self._prune()
        return server

    def _fill(self, server, engine, version: int) -> None:
        """Send the present model to clients for the free slots, drawn from the idle available ones;
        with :func:`exact_work` their arrival is known now, otherwise once they train (:meth:`step`)."""
        free = self.opts.concurrency - (len(self.flight) - len(self.buffered))
        if free <= 0:
            return
        on, until = self.fleet.available()
        busy = {e["client"] for s, e in self.flight.items() if s not in self.buffered}
        ids = _idle_draw(on, busy, free, server_generator(self.seed, "asynchronous", self.dispatches))
        if not ids.size:
            return
        self.dispatches += 1
        if version not in self.messages:
            self.messages[version] = {k: v.clone() for k, v in self.algorithm.broadcast(server).items()}
        message = self.messages[version]
        engine.comm.down(message, ids.size)
        sent = self.sent.setdefault(version, {})
        nbytes = self.fleet.bytes(message)
        for client in ids.tolist():
            repeat = sent.get(client, 0)
            sent[client] = repeat + 1
            label = version + (repeat << 32)
            one, factor = np.array([client]), self.fleet.jitter(np.array([client]), label)
            t = self.fleet.now + int(self.fleet.down(one, nbytes, factor)[0])  # when the model is there
            least = self.fleet.compute(one, self.work[one], factor) + self.fleet.up(one, self.upload_bytes, factor)
            entry = {"client": client, "version": version, "label": label, "model_at": t,
                     "earliest": t + int(least[0]), "until": int(until[client])}
            if self.exact:
                self._arrives(entry, entry["earliest"], self.sequence)
            self.flight[self.sequence] = entry
            self.sequence += 1

    def _arrives(self, entry: dict, tick: int, seq: int) -> None:
        entry.update(arrival=tick, lost=tick > entry["until"])
        heapq.heappush(self.events, (tick, entry["client"], seq))

    def _train(self, engine, seqs: list[int]) -> None:
        """Train the clients ``seqs`` need, with every untrained client of their start versions (and
        repeats) in flight: one vectorised call per label."""
        labels = {self.flight[s]["label"] for s in seqs if "x" not in self.flight[s]}
        by_label: dict[int, list[int]] = {}
        for seq, e in self.flight.items():
            if e["label"] in labels and "x" not in e:
                by_label.setdefault(e["label"], []).append(seq)
        for label, group in sorted(by_label.items()):
            group.sort(key=lambda s: self.flight[s]["client"])
            ids = torch.tensor([self.flight[s]["client"] for s in group], dtype=torch.int64)
            message = self.messages[self.flight[group[0]]["version"]]
            trained = list(engine.train(message, ids, label))
            engine.commit(ids, {}, label)  # stateless clients: nothing kept
            row = {self.flight[s]["client"]: s for s in group}
            for part, up in trained:
                if up is None:  # a node's reply that could not be read: lost
                    for client in part.tolist():
                        entry = self.flight[row[client]]
                        entry.update(x=torch.full_like(message["x0"], math.nan), residual=0.0)
                        if "arrival" not in entry:
                            self._arrives(entry, entry["earliest"], row[client])
                        entry["lost"] = True
                    continue
                self._trained(part, up, message, row)
        self._prune()

    def _trained(self, part: Tensor, up: dict, message: dict, row: dict[int, int]) -> None:
        work = up.get(WORK)
        up = {k: v for k, v in up.items() if k != WORK}
        p = part.numpy()
        work_np = np.zeros(p.size) if work is None else work.cpu().numpy()
        residual = sq_dist(up["x"], message["x0"])  # ‖x_k − x_τ‖²: the primal residual
        for r, client in enumerate(p.tolist()):
            seq = row[client]
            entry = self.flight[seq]
            entry.update(x=up["x"][r].clone(), residual=float(residual[r]))
            if self.exact and work_np[r] != self.work[client]:
                raise RuntimeError(f"client {client} counted {work_np[r]:g} sample gradients where "
                                   f"{self.work[client]:g} were predicted (fedpd.asynchronous.exact_work is wrong)")
            if "arrival" in entry:
                continue
            factor = self.fleet.jitter(p[r:r + 1], entry["label"])
            tick = int(entry["model_at"] + self.fleet.compute(p[r:r + 1], work_np[r:r + 1], factor)[0] +
                       self.fleet.up(p[r:r + 1], self.fleet.bytes(up, p.size), factor)[0])
            if tick < self.fleet.now or tick < entry["earliest"]:
                raise RuntimeError(f"client {client} arrives at tick {tick}, before the bound of its training "
                                   f"({entry['earliest']}) or the clock ({self.fleet.now}): work_bound is wrong")
            self._arrives(entry, tick, seq)

    def _wait_for_a_client(self) -> None:
        """Nobody in flight and nobody idle and available: the clock moves to the next availability."""
        on, until = self.fleet.available()
        nxt = int(until[~on].min()) if (~on).any() else self.fleet.now
        if nxt <= self.fleet.now or nxt >= np.iinfo(np.int64).max:
            raise ConfigError("asynchronous: no client is in flight and none will be available again (allowed: "
                              "more clients, or availability that lets them come back)")
        self.fleet.now = nxt

    def _prune(self) -> None:
        """Forget the messages (and whom they went to) of versions no client in flight started from,
        but the newest (clients may still be sent it)."""
        used = {e["version"] for e in self.flight.values()}
        newest = max(self.messages, default=-1)
        for v in [v for v in self.messages if v not in used and v != newest]:
            del self.messages[v]
        for v in [v for v in self.sent if v < newest]:
            del self.sent[v]

    # --- records and checkpoints -------------------------------------------------------------
    def metrics(self) -> dict:
        """``staleness``: the mean τ of the uploads of the last server update (none before the first)."""
        return {} if math.isnan(self.staleness) else {"staleness": self.staleness}

    #: an entry's integer fields, in a checkpoint's table (-1: not known yet)
    FIELDS = ("client", "version", "label", "model_at", "earliest", "until", "arrival", "lost", "tau")

    def state_dict(self) -> dict:
        seqs = sorted(self.flight)
        table = [[s, *(int(self.flight[s].get(k, -1)) for k in self.FIELDS)] for s in seqs]
        trained = [s for s in seqs if "x" in self.flight[s]]
        return {"dispatches": self.dispatches, "sequence": self.sequence,
                "flight": torch.tensor(table, dtype=torch.int64).reshape(-1, 1 + len(self.FIELDS)),
                "trained": torch.tensor(trained, dtype=torch.int64),
                "x": [self.flight[s]["x"] for s in trained],
                "residual": torch.tensor([self.flight[s]["residual"] for s in trained], dtype=torch.float64),
                "buffered": torch.tensor(self.buffered, dtype=torch.int64),
                "messages": {str(v): m for v, m in self.messages.items()},
                "sent": {str(v): torch.tensor(sorted(c.items()), dtype=torch.int64).reshape(-1, 2)
                         for v, c in self.sent.items()},
                "staleness": self.staleness}

    def load_state_dict(self, sd: dict) -> None:
        self.dispatches, self.sequence = int(sd["dispatches"]), int(sd["sequence"])
        self.flight, self.events = {}, []
        self.buffered = sd["buffered"].tolist()
        for seq, *values in sd["flight"].tolist():
            entry = {k: v for k, v in zip(self.FIELDS, values) if v != -1 or k in ("client", "version", "label")}
            if "lost" in entry:
                entry["lost"] = bool(entry["lost"])
            self.flight[seq] = entry
            if "arrival" in entry and seq not in self.buffered:
                self.events.append((entry["arrival"], entry["client"], seq))
        for seq, x, r in zip(sd["trained"].tolist(), sd["x"], sd["residual"].tolist()):
            self.flight[seq].update(x=x, residual=r)
        heapq.heapify(self.events)
        self.messages = {int(v): m for v, m in sd["messages"].items()}
        self.sent = {int(v): dict(c.tolist()) for v, c in sd["sent"].items()}
        self.staleness = float(sd["staleness"])
