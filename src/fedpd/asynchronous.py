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
repeat), so the clients that start from one version train in one vectorised call: training waits until an arrival time is needed — until the
earliest known arrival is not before the earliest a waiting client could arrive (its download and
upload, and the fewest sample gradients its solver can count, :func:`work_bound`) — and the result
does not depend on how they were grouped (the engine contract). A checkpoint holds the clients in
flight (the trained ones with their uploads), their start versions, the buffer and the clock, so a
resume continues the same event sequence.
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
from fedpd.options import Options, refuse, set_apart_from_defaults
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
        given = set_apart_from_defaults(self)
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
    any other solver. A lower bound only: it decides when training may wait, never a time."""
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
    per_step = np.full(sizes.size, float(batch)) if batch else sizes.astype(np.float64)
    return steps * np.minimum(per_step, sizes) if not batch else steps * per_step


class AsyncServer:
    """The event loop (module docstring). ``step`` runs events until the next server update."""

    def __init__(self, opts: AsynchronousOptions, algorithm, fleet, problem, solver, seed: int):
        self.opts, self.algorithm, self.fleet = opts, algorithm, fleet
        self.num_clients, self.seed = problem.num_clients, seed
        sizes = problem.train.sizes.cpu().numpy()
        model = problem.x_init
        upload = model.numel() * (fleet.opts.bytes_per_float or model.element_size())
        ids = np.arange(self.num_clients)
        # the earliest a client could arrive after its model arrives: its fewest sample gradients and the upload
        self.least = fleet.compute(ids, work_bound(solver, sizes)) + fleet.up(ids, upload)
        self.dispatches = 0  # dispatch calls so far: each one's draw
        self.sequence = 0  # clients dispatched so far: the events' last tie-break
        self.events: list[tuple[int, int, int]] = []  # heap of (arrival tick, client, sequence): trained clients
        self.flight: dict[int, dict] = {}  # sequence -> a client in flight: client, version, trained or not, ...
        self.messages: dict[int, dict] = {}  # version -> the message clients downloaded then
        self.sent: dict[int, dict[int, int]] = {}  # version -> {client: how often it was sent it}
        self._empty_buffer()
        self.staleness = math.nan  # the mean τ of the last update's uploads

    def _empty_buffer(self) -> None:
        self.buffer, self.buffered, self.residuals, self.taus = None, [], [], []

    # --- the loop ------------------------------------------------------------------------------
    def step(self, server, engine, version: int):
        """Events until one server update; returns the new server state (version ``version`` + 1)."""
        comm = engine.comm
        while True:
            self._fill(server, engine, version)
            waiting = [s for s, e in self.flight.items() if "x" not in e]
            if waiting and (not self.events or self.events[0][0] >= min(self.flight[s]["earliest"] for s in waiting)):
                self._train(engine, waiting)
                continue
            if not self.events:
                self._wait_for_a_client()
                continue
            arrival, client, seq = heapq.heappop(self.events)
            entry = self.flight.pop(seq)
            self.fleet.now = arrival
            if entry["lost"]:  # its available period ended before the upload arrived
                comm.dropouts += 1
                continue
            x = entry["x"]
            comm.up({"x": x.unsqueeze(0)})
            if not bool(torch.isfinite(x).all()):
                comm.rejected_uploads += 1
                continue
            tau = version - entry["version"]
            s = self.opts.weight(tau)
            self.buffered.append(client)
            self.residuals.append(entry["residual"])
            self.taus.append(tau)
            x0 = server["x0"]
            if self.opts.name == "fedasync":
                return self._apply(server, (1 - self.opts.alpha * s) * x0 + (self.opts.alpha * s) * x, version, comm)
            delta = s * (self.messages[entry["version"]]["x0"] - x)
            self.buffer = delta if self.buffer is None else self.buffer + delta
            if len(self.buffered) == self.opts.buffer:
                return self._apply(server, x0 - self.opts.server_lr * self.buffer / self.opts.buffer, version, comm)

    def _apply(self, server, x_bar: Tensor, version: int, comm):
        from fedpd.protocol import server_step

        ids = torch.tensor(sorted(self.buffered), dtype=torch.int64)
        residual = torch.tensor(sum(self.residuals) / len(self.residuals), dtype=x_bar.dtype, device=x_bar.device)
        ctx = ServerContext(ids, version, self.num_clients, self.seed)
        server, reply = server_step(self.algorithm, "aggregate_means", server,
                                    {"x": x_bar, "primal_residual": residual}, ctx)
        self.staleness = sum(self.taus) / len(self.taus)
        self._empty_buffer()
        comm.end_round()
        return server

    def _fill(self, server, engine, version: int) -> None:
        """Send the present model to clients for the free slots, drawn from the idle available ones
        not yet sent this version; they train when an arrival time is needed (:meth:`step`)."""
        free = self.opts.concurrency - len(self.flight)
        if free <= 0:
            return
        on, until = self.fleet.available()
        on[[e["client"] for e in self.flight.values()]] = False
        idle = np.flatnonzero(on)
        if not idle.size:
            return
        g = server_generator(self.seed, "asynchronous", self.dispatches)
        ids = idle[torch.randperm(idle.size, generator=g)[:free].sort().values.numpy()]
        self.dispatches += 1
        if version not in self.messages:
            self.messages[version] = {k: v.clone() for k, v in self.algorithm.broadcast(server).items()}
        message = self.messages[version]
        engine.comm.down(message, ids.size)
        sent = self.sent.setdefault(version, {})
        arrives = self.fleet.now + self.fleet.down(ids, self.fleet.bytes(message))  # when the model is there
        for client, t in zip(ids.tolist(), arrives.tolist()):
            repeat = sent.get(client, 0)
            sent[client] = repeat + 1
            self.flight[self.sequence] = {"client": client, "version": version, "label": version + (repeat << 32),
                                          "model_at": t, "earliest": t + int(self.least[client]),
                                          "until": int(until[client])}
            self.sequence += 1

    def _train(self, engine, waiting: list[int]) -> None:
        """Train the clients in flight that wait, one vectorised call per start version (and repeat)."""
        by_label: dict[int, list[int]] = {}
        for seq in waiting:
            by_label.setdefault(self.flight[seq]["label"], []).append(seq)
        for label, seqs in sorted(by_label.items()):
            seqs.sort(key=lambda s: self.flight[s]["client"])
            ids = torch.tensor([self.flight[s]["client"] for s in seqs], dtype=torch.int64)
            message = self.messages[self.flight[seqs[0]]["version"]]
            trained = list(engine.train(message, ids, label))
            engine.commit(ids, {}, label)  # stateless clients: nothing kept
            row = {int(c): s for c, s in zip(ids.tolist(), seqs)}
            for part, up in trained:
                if up is None:  # a node's reply that could not be read: lost
                    for client in part.tolist():
                        self.flight[row[client]].update(lost=True, x=None, residual=0.0)
                        heapq.heappush(self.events, (self.flight[row[client]]["model_at"], client, row[client]))
                    continue
                work = up.get(WORK)
                up = {k: v for k, v in up.items() if k != WORK}
                p = part.numpy()
                model_at = np.array([self.flight[row[c]]["model_at"] for c in p.tolist()], dtype=np.int64)
                done = model_at + self.fleet.compute(p, np.zeros(p.size) if work is None else work.cpu().numpy())
                arrival = done + self.fleet.up(p, self.fleet.bytes(up, p.size))
                residual = sq_dist(up["x"], message["x0"])  # ‖x_k − x_τ‖²: the primal residual
                for r, (client, t) in enumerate(zip(p.tolist(), arrival.tolist())):
                    seq = row[client]
                    entry = self.flight[seq]
                    if t < self.fleet.now or t < entry["earliest"]:
                        raise RuntimeError(f"client {client} arrives at tick {t}, before the bound of its training "
                                           f"({entry['earliest']}) or the clock ({self.fleet.now}): work_bound is wrong")
                    entry.update(x=up["x"][r].clone(), residual=float(residual[r]), lost=t > entry["until"])
                    heapq.heappush(self.events, (t, client, seq))
        self._prune()

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

    def state_dict(self) -> dict:
        seqs = sorted(self.flight)
        entries = [self.flight[s] for s in seqs]
        arrival = {seq: t for t, _, seq in self.events}
        trained = [s for s in seqs if "x" in self.flight[s]]
        return {"dispatches": self.dispatches, "sequence": self.sequence,
                "flight": torch.tensor([[s, e["client"], e["version"], e["label"], e["model_at"], e["earliest"],
                                         e["until"], arrival.get(s, -1), int(e.get("lost", False))]
                                        for s, e in zip(seqs, entries)], dtype=torch.int64).reshape(-1, 9),
                "residual": torch.tensor([self.flight[s]["residual"] for s in trained], dtype=torch.float64),
                "x": [self.flight[s]["x"] for s in trained],
                "messages": {str(v): m for v, m in self.messages.items()},
                "sent": {str(v): torch.tensor(sorted(c.items()), dtype=torch.int64).reshape(-1, 2)
                         for v, c in self.sent.items()},
                "buffer": self.buffer, "buffered": list(self.buffered), "residuals": list(self.residuals),
                "taus": list(self.taus), "staleness": self.staleness}

    def load_state_dict(self, sd: dict) -> None:
        self.dispatches, self.sequence = int(sd["dispatches"]), int(sd["sequence"])
        self.flight, self.events = {}, []
        xs, residuals = list(sd["x"]), sd["residual"].tolist()
        for seq, client, version, label, model_at, earliest, until, arrival, lost in sd["flight"].tolist():
            entry = {"client": client, "version": version, "label": label, "model_at": model_at, "earliest": earliest,
                     "until": until}
            if arrival >= 0:  # trained: its upload and arrival
                entry.update(x=xs.pop(0), residual=residuals.pop(0), lost=bool(lost))
                self.events.append((arrival, client, seq))
            self.flight[seq] = entry
        heapq.heapify(self.events)
        self.messages = {int(v): m for v, m in sd["messages"].items()}
        self.sent = {int(v): dict(c.tolist()) for v, c in sd["sent"].items()}
        self.buffer, self.buffered = sd["buffer"], list(sd["buffered"])
        self.residuals, self.taus, self.staleness = list(sd["residuals"]), list(sd["taus"]), float(sd["staleness"])
