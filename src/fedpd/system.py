"""The fleet: each client's device and links, when it is available, and how long an exchange takes.

``[system]`` (absent: no clock, every record as before) gives every client a compute speed
(FLOP/s), an uplink and a downlink bandwidth (bytes/s), a latency (s) and an availability, each
drawn once per client from its own counter-based stream, keyed by (run seed, "system", client id)
(:mod:`fedpd.streams`) — or read from the user's CSV files. An exchange of client k that starts
at t0 (the shape FedScale's and FLGo's virtual clocks share):

    down_k    = latency_k + bytes sent to k / downlink_k
    compute_k = sample gradients k evaluated × cost per sample gradient / speed_k
    up_k      = latency_k + bytes k sent / uplink_k
    arrival_k = t0 + down_k + compute_k + up_k

The sample gradients are those fedpd counts (``sample_grads``), per client; the cost per sample
gradient is ``flops_per_sample`` (default 3 × the model's forward FLOPs: a forward and a backward);
bytes are the floats counted at the message boundary × their element size (``bytes_per_float``
overrides it). An exchange is lost when the client's available period ends before its upload
arrives (counted as a dropout). Times are kept in whole microseconds (integers), so events that
a CPU's last bit would move never change order across machines.

Distributions (each of ``speed``, ``uplink``, ``downlink``, ``latency``): a number (the same for
every client), ``{dist = "lognormal", median, sigma}`` (median · exp(σ z), z standard normal: the
usual fit to measured phone fleets), or ``{dist = "classes", values = [...], shares = [...]}``
(a discrete mix of device classes). Every ``classes`` quantity places client k by one number u_k
in [0, 1): its own uniform draw (``classes_by = "random"``, so a slow class is slow on every
quantity given the same shares) or, with ``classes_by = "label"``, (ℓ_k + ½) / C for its most
frequent training label ℓ_k of C — a device class per label group, the correlation between speed
and data that makes dropouts matter on a Dirichlet split.

Availability: ``always``; ``markov``, a two-state on/off chain per client (exponential on and off
periods of means ``mean_on_s`` and ``mean_off_s``, started in its stationary state, the draw at
position 0 of its stream; its j-th period is the draw at position j + 1); or ``file``, on-intervals
per client.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import Field, ValidationError, field_validator, model_validator
from torch import Tensor

from fedpd.errors import ConfigError
from fedpd.options import Options, refuse
from fedpd.streams import ClientStreams

#: simulated time is kept in integer microseconds
TICKS_PER_S = 1_000_000
NEVER = np.iinfo(np.int64).max
#: the longest time an option or a file may give, s (about 31 700 years: far inside the int64 ticks' range)
MAX_S = 1e12
QUANTITIES = ("speed", "uplink", "downlink", "latency")
PROFILE_COLUMNS = ("client", *QUANTITIES)
AVAILABILITY_COLUMNS = ("client", "start_s", "end_s")


class Distribution(Options):
    dist: Literal["constant", "lognormal", "classes"] = Field(description="constant, lognormal or classes")
    value: float | None = Field(None, ge=0, description="constant: the value")
    median: float | None = Field(None, gt=0, description="lognormal: the median")
    sigma: float | None = Field(None, ge=0, le=10, description="lognormal: σ of the log")
    values: list[float] | None = Field(None, description="classes: each class's value")
    shares: list[float] | None = Field(None, description="classes: each class's share (sum 1) of the clients "
                                       "(classes_by = \"random\") or of the label range (\"label\")")

    @model_validator(mode="after")
    def _complete(self):
        need = {"constant": ("value",), "lognormal": ("median", "sigma"), "classes": ("values", "shares")}[self.dist]
        given = self.model_fields_set - {"dist"}
        for key in need:
            if key not in given:
                raise refuse(key, f"dist = \"{self.dist}\" needs {' and '.join(need)}")
        extra = sorted(given - set(need))
        if extra:
            raise refuse(extra[0], f"is not an option of dist = \"{self.dist}\" (allowed: {', '.join(need)})")
        if self.dist == "classes":
            if not self.values or len(self.values) != len(self.shares):
                raise refuse("shares", f"one share per class value ({len(self.values)} values, "
                             f"{len(self.shares)} shares)")
            if any(not math.isfinite(v) or v < 0 for v in self.values):
                raise refuse("values", "every class value is a finite number, 0 or more")
            if any(s < 0 for s in self.shares) or abs(sum(self.shares) - 1) > 1e-9:
                raise refuse("shares", f"shares are 0 or more and sum to 1 (they sum to {sum(self.shares):g})")
        return self


Quantity = float | Distribution


class SystemOptions(Options):
    speed: Quantity = Field(1e10, description="compute speed, FLOP/s: a number or a distribution table")
    uplink: Quantity = Field(1.25e6, description="uplink bandwidth, bytes/s (10 Mbit/s)")
    downlink: Quantity = Field(6.25e6, description="downlink bandwidth, bytes/s (50 Mbit/s)")
    latency: Quantity = Field(0.05, description="one-way latency of a message, s")
    classes_by: Literal["random", "label"] = Field(
        "random", description="how a 'classes' distribution places a client: its own draw, or its most frequent "
        "training label (a device class per label group)")
    flops_per_sample: float = Field(0.0, ge=0, description="cost of one sample gradient, FLOP; 0: 3 × the model's "
                                    "forward FLOPs")
    bytes_per_float: int = Field(0, ge=0, le=8, description="bytes a counted float takes on the wire; 0: its dtype's")
    profile: str = Field("", description="a CSV file of client,speed,uplink,downlink,latency (one row per client) "
                         "in place of the distributions")
    availability: Literal["always", "markov", "file"] = Field(
        "always", description="always; markov: on/off periods per client; file: availability_file's on-intervals")
    mean_on_s: float = Field(3600.0, gt=0, le=MAX_S, description="markov: mean length of an available period, s")
    mean_off_s: float = Field(3600.0, gt=0, le=MAX_S, description="markov: mean length of an unavailable period, "
                              "s")
    availability_file: str = Field("", description="availability = \"file\": a CSV of client,start_s,end_s "
                                   "on-intervals (every client at least once; start_s = end_s: never on)")
    jitter: float = Field(0.0, ge=0, le=5, description="σ of each exchange's own lognormal factor on its durations "
                          "(median 1): a client is not equally fast every round; 0: the same every round")
    deadline_s: float = Field(0.0, ge=0, le=MAX_S, description="synchronous rounds: uploads that arrive later than "
                              "this after the round starts are dropped (dropouts); 0: no deadline")
    overselect: float = Field(1.0, ge=1, le=10, description="synchronous rounds: select this many times the sampler's "
                              "K of the available clients and keep the first K uploads to arrive (Bonawitz et al. "
                              "2019: 1.3)")

    @field_validator(*QUANTITIES, mode="before")
    @classmethod
    def _distribution(cls, value):
        """A table is a :class:`Distribution`, its errors named by its own keys."""
        if not isinstance(value, dict):
            return value
        try:
            return Distribution.model_validate(value)
        except ValidationError as err:
            e = err.errors()[0]
            where = ".".join(str(p) for p in e["loc"])
            text = e["ctx"]["error"] if e["type"] == "value_error" and "error" in e.get("ctx", {}) else e["msg"]
            raise ValueError(f"{where}: {text}" if where else str(text)) from None

    @model_validator(mode="after")
    def _no_ignored_option(self):
        given = set(self.given(*type(self).model_fields))
        if self.profile:
            overridden = [q for q in QUANTITIES if q in given]
            if overridden:
                raise refuse(overridden[0], f"is given by the profile {self.profile!r} (allowed: the profile or the "
                             f"distributions, not both)")
        for q in QUANTITIES:
            value = getattr(self, q)
            low = 0.0 if q == "latency" else None
            if isinstance(value, float) and (value < 0 or (low is None and value == 0)):
                raise refuse(q, f"{value:g} is not allowed (allowed: {'0 or more' if low == 0 else 'more than 0'})")
            if isinstance(value, Distribution) and q != "latency":
                if (value.dist == "constant" and value.value == 0) or (value.values and min(value.values) == 0):
                    raise refuse(q, "a client with 0 would never finish (allowed: values more than 0)")
        if "classes_by" in given and not any(isinstance(getattr(self, q), Distribution) and
                                             getattr(self, q).dist == "classes" for q in QUANTITIES):
            raise refuse("classes_by", "places a client in a 'classes' distribution, and no quantity has one "
                         "(allowed: no classes_by, or a quantity with dist = \"classes\")")
        for key, mode in (("mean_on_s", "markov"), ("mean_off_s", "markov"), ("availability_file", "file")):
            if key in given and self.availability != mode:
                raise refuse(key, f"is availability = \"{mode}\"'s (availability is \"{self.availability}\")")
        if self.availability == "file" and not self.availability_file:
            raise refuse("availability_file", "availability = \"file\" needs the file")
        return self


def to_ticks(seconds) -> np.ndarray:
    """Seconds (float64) as whole microseconds, rounded to nearest."""
    return np.rint(np.asarray(seconds, dtype=np.float64) * TICKS_PER_S).astype(np.int64)


def seconds(ticks: int) -> float:
    return ticks / TICKS_PER_S


# --- the fleet's profiles ------------------------------------------------------------------------
def _draw(spec: Quantity, name: str, streams: ClientStreams, u_class: np.ndarray) -> np.ndarray:
    """One value per client of ``spec``."""
    n = len(streams)
    if isinstance(spec, float):
        return np.full(n, spec)
    if spec.dist == "constant":
        return np.full(n, spec.value)
    if spec.dist == "lognormal":
        z = streams.child(name).normal(1)[:, 0].numpy()
        return spec.median * np.exp(spec.sigma * z)
    bounds = np.cumsum(spec.shares)[:-1]
    return np.asarray(spec.values, dtype=np.float64)[np.searchsorted(bounds, u_class, side="right")]


def _dominant_labels(problem) -> tuple[np.ndarray, int]:
    """Each client's most frequent training label (ties: the smallest) and the number of labels."""
    split = problem.train
    y = split.y.detach().cpu().to(torch.int64)
    if y.dim() != 1 or not problem.classifies:
        raise ConfigError("system.classes_by = \"label\": needs a classification problem with one label per sample "
                          "(allowed: classes_by = \"random\")")
    classes = int(y.max()) + 1 if y.numel() else 1
    owner = torch.repeat_interleave(torch.arange(split.num_clients), split.sizes.cpu())
    counts = torch.zeros(split.num_clients, classes, dtype=torch.int64)
    counts.index_put_((owner, y), torch.ones_like(y), accumulate=True)
    return counts.argmax(1).numpy(), classes


def _read_csv(path: str, columns: tuple[str, ...], key: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every data row of the CSV file ``path`` with exactly ``columns``."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"system.{key}: no file {path!r} (allowed: a CSV file with columns {', '.join(columns)})")
    try:
        with open(file, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ConfigError(f"system.{key}: cannot read {path} ({err}) (allowed: a readable UTF-8 CSV file with "
                          f"columns {', '.join(columns)})") from None
    if not rows or [c.strip() for c in rows[0]] != list(columns):
        head = ",".join(rows[0]) if rows else "nothing"
        raise ConfigError(f"system.{key}: {path} starts with {head!r} (allowed: the header {','.join(columns)})")
    out = []
    for line, cells in enumerate(rows[1:], 2):
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(columns):
            raise ConfigError(f"system.{key}: {path} line {line} has {len(cells)} cells (allowed: {len(columns)}: "
                              f"{','.join(columns)})")
        out.append((line, [c.strip() for c in cells]))
    return out


def _number(text: str, where: str, low: float, strict: bool, high: float = math.inf) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < low or (strict and value == low) or value > high:
        most = f", at most {high:g}" if high < math.inf else ""
        allowed = f"a number {'more than' if strict else 'at least'} {low:g}{most}"
        raise ConfigError(f"{where} is {text!r} (allowed: {allowed})")
    return value


def _client(text: str, where: str, num_clients: int) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) >= num_clients:
        raise ConfigError(f"{where}: client {text!r} (allowed: the ids 0 to {num_clients - 1})")
    return int(text)


def read_profile(path: str, num_clients: int) -> dict[str, np.ndarray]:
    """The quantities of every client from a profile CSV (one row per client, every client once)."""
    values = {q: np.full(num_clients, np.nan) for q in QUANTITIES}
    seen = np.zeros(num_clients, dtype=bool)
    for line, cells in _read_csv(path, PROFILE_COLUMNS, "profile"):
        where = f"system.profile: {path} line {line}"
        k = _client(cells[0], where, num_clients)
        if seen[k]:
            raise ConfigError(f"{where}: client {k} appears twice (allowed: one row per client)")
        seen[k] = True
        for q, text in zip(QUANTITIES, cells[1:]):
            values[q][k] = _number(text, f"{where}, {q}", 0.0, strict=q != "latency")
    if not seen.all():
        missing = np.flatnonzero(~seen)
        raise ConfigError(f"system.profile: {path} has no row for client {int(missing[0])} ({missing.size} missing; "
                          f"allowed: one row for each of the clients 0 to {num_clients - 1})")
    return values


# --- availability -------------------------------------------------------------------------------
class AlwaysOn:
    """Every client available at every time."""

    def __init__(self, num_clients: int):
        self.num_clients = num_clients
        self.on, self.until = np.ones(num_clients, dtype=bool), np.full(num_clients, NEVER, dtype=np.int64)

    def at(self, now: int) -> tuple[np.ndarray, np.ndarray]:
        """(available [N] bool, end of the present period [N] ticks) at ``now`` (times never decrease);
        the arrays are the model's own: read them, do not change them."""
        return self.on, self.until

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, sd: dict) -> None:
        pass


class MarkovOnOff:
    """A two-state chain per client: exponential on periods of mean ``mean_on`` and off periods of
    mean ``mean_off`` (ticks), started in the stationary state; period j of client k is drawn at
    position j of k's stream (seed, "availability", 0), so it is the same however far the run has got."""

    def __init__(self, num_clients: int, seed: int, mean_on: float, mean_off: float):
        self.mean_on, self.mean_off = mean_on, mean_off
        self.keys = ClientStreams.of(seed, "availability", 0, torch.arange(num_clients)).keys
        self.on = self._uniform(np.zeros(num_clients, dtype=np.uint64)) < mean_on / (mean_on + mean_off)
        self.period = np.zeros(num_clients, dtype=np.int64)
        self.until = self._length(np.arange(num_clients), self.on)
        self.next = 0  # no period ends before this tick (the earliest until)

    def _uniform(self, positions: np.ndarray, rows=slice(None)) -> np.ndarray:
        return ClientStreams(self.keys[rows]).uniform_at(positions)

    def _length(self, rows: np.ndarray, on: np.ndarray) -> np.ndarray:
        """Ticks of the period ``self.period[rows]`` of clients ``rows`` (state ``on``), at least one."""
        u = self._uniform(self.period[rows].astype(np.uint64) + np.uint64(1), rows)
        mean = np.where(on, self.mean_on, self.mean_off)
        return np.maximum(1, to_ticks(-mean * np.log1p(-u) / TICKS_PER_S))

    def at(self, now: int) -> tuple[np.ndarray, np.ndarray]:
        if now < self.next:  # no period has ended since the last call: O(1)
            return self.on, self.until
        while True:
            rows = np.flatnonzero(self.until <= now)
            if not rows.size:
                self.next = int(self.until.min())
                return self.on, self.until
            self.on[rows] = ~self.on[rows]
            self.period[rows] += 1
            self.until[rows] += self._length(rows, self.on[rows])

    def state_dict(self) -> dict:
        return {"on": torch.from_numpy(self.on.copy()), "period": torch.from_numpy(self.period.copy()),
                "until": torch.from_numpy(self.until.copy())}

    def load_state_dict(self, sd: dict) -> None:
        self.on, self.period, self.until = (sd[k].cpu().numpy().copy() for k in ("on", "period", "until"))
        self.next = 0


class Intervals:
    """On-intervals per client from a CSV file (client,start_s,end_s; every client at least once)."""

    def __init__(self, path: str, num_clients: int):
        rows = []
        for line, cells in _read_csv(path, AVAILABILITY_COLUMNS, "availability_file"):
            where = f"system.availability_file: {path} line {line}"
            k = _client(cells[0], where, num_clients)
            start = _number(cells[1], f"{where}, start_s", 0.0, strict=False, high=MAX_S)
            end = _number(cells[2], f"{where}, end_s", 0.0, strict=False, high=MAX_S)
            if end < start:
                raise ConfigError(f"{where}: the interval ends at {end:g} s, before it starts at {start:g} s "
                                  f"(allowed: end_s at least start_s)")
            rows.append((k, int(to_ticks(start)), int(to_ticks(end)), line))
        rows.sort()
        clients = np.array([r[0] for r in rows], dtype=np.int64)
        missing = np.setdiff1d(np.arange(num_clients), clients)
        if missing.size:
            raise ConfigError(f"system.availability_file: {path} has no interval for client {int(missing[0])} "
                              f"({missing.size} missing; allowed: every client at least once — start_s = end_s for "
                              f"one that is never available)")
        for a, b in zip(rows, rows[1:]):
            if a[0] == b[0] and b[1] < a[2]:
                raise ConfigError(f"system.availability_file: {path} line {b[3]}: client {b[0]}'s intervals overlap "
                                  f"(allowed: disjoint intervals)")
        self.start = np.array([r[1] for r in rows], dtype=np.int64)
        self.end = np.array([r[2] for r in rows], dtype=np.int64)
        self.first = np.searchsorted(clients, np.arange(num_clients))  # each client's first interval
        self.last = np.searchsorted(clients, np.arange(num_clients), side="right")  # one past its last
        self.pointer = self.first.copy()

    def at(self, now: int) -> tuple[np.ndarray, np.ndarray]:
        while True:  # skip every interval that has ended
            rows = np.flatnonzero((self.pointer < self.last) & (self.end[np.minimum(self.pointer, len(self.end) - 1)]
                                                                <= now))
            if not rows.size:
                break
            self.pointer[rows] += 1
        left = self.pointer < self.last
        p = np.minimum(self.pointer, len(self.end) - 1)
        on = left & (self.start[p] <= now) & (now < self.end[p])
        until = np.where(~left, NEVER, np.where(on, self.end[p], self.start[p]))
        return on, until

    def state_dict(self) -> dict:
        return {"pointer": torch.from_numpy(self.pointer.copy())}

    def load_state_dict(self, sd: dict) -> None:
        self.pointer = sd["pointer"].cpu().numpy().copy()


# --- the fleet -----------------------------------------------------------------------------------
class Fleet:
    """Every client's speed (FLOP/s), bandwidths (bytes/s), latency (s) and availability; the
    clock (``now``, ticks) and how long exchanges take."""

    def __init__(self, opts: SystemOptions, problem, seed: int, flops_per_sample: float):
        n = problem.num_clients
        self.opts, self.num_clients, self.seed = opts, n, seed
        if opts.profile:
            drawn = read_profile(opts.profile, n)
        else:
            streams = ClientStreams.of(seed, "system", 0, torch.arange(n))
            if opts.classes_by == "label":
                labels, classes = _dominant_labels(problem)
                u_class = (labels + 0.5) / classes
            else:
                u_class = streams.child("class").uniform(1)[:, 0].numpy()
            drawn = {q: _draw(getattr(opts, q), q, streams, u_class) for q in QUANTITIES}
        self.speed, self.uplink, self.downlink, self.latency = (drawn[q] for q in QUANTITIES)
        self.flops_per_sample = opts.flops_per_sample or flops_per_sample
        if opts.availability == "markov":
            self.availability = MarkovOnOff(n, seed, opts.mean_on_s * TICKS_PER_S, opts.mean_off_s * TICKS_PER_S)
        elif opts.availability == "file":
            self.availability = Intervals(opts.availability_file, n)
        else:
            self.availability = AlwaysOn(n)
        self.now = 0
        #: this round's over-selection target K (None: keep every upload that arrives in time)
        self.target: int | None = None

    def bytes(self, message: dict[str, Tensor], rows: int = 1) -> float:
        """Bytes of one client's share of ``message`` (rows: how many clients it stacks)."""
        from fedpd.comm import counted

        total = 0
        for t in counted(message).values():
            total += t.numel() * (self.opts.bytes_per_float or t.element_size())
        return total / max(rows, 1)

    def down(self, ids: np.ndarray, nbytes: float, factor: np.ndarray | float = 1.0) -> np.ndarray:
        """Ticks to deliver ``nbytes`` to each client of ``ids`` (nothing sent: no message, no time);
        ``factor``: the exchanges' :meth:`jitter`."""
        if not nbytes:
            return np.zeros(len(ids), dtype=np.int64)
        return to_ticks(factor * (self.latency[ids] + nbytes / self.downlink[ids]))

    def up(self, ids: np.ndarray, nbytes: float, factor: np.ndarray | float = 1.0) -> np.ndarray:
        if not nbytes:
            return np.zeros(len(ids), dtype=np.int64)
        return to_ticks(factor * (self.latency[ids] + nbytes / self.uplink[ids]))

    def compute(self, ids: np.ndarray, work: np.ndarray, factor: np.ndarray | float = 1.0) -> np.ndarray:
        """Ticks for clients ``ids`` to evaluate ``work`` sample gradients each."""
        return to_ticks(factor * work * self.flops_per_sample / self.speed[ids])

    def jitter(self, ids: np.ndarray, label: int) -> np.ndarray | float:
        """Each exchange's own factor on its durations, exp(σ z) with z drawn from the client's stream
        (run seed, "jitter", ``label``: the round, or an asynchronous dispatch's label); 1 when σ = 0."""
        if not self.opts.jitter:
            return 1.0
        z = ClientStreams.of(self.seed, "jitter", label, torch.as_tensor(ids, dtype=torch.int64)).normal(1)[:, 0]
        return np.exp(self.opts.jitter * z.numpy())

    def available(self, now: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.availability.at(self.now if now is None else now)

    def state_dict(self) -> dict:
        return {"now": self.now, "availability": self.availability.state_dict()}

    def load_state_dict(self, sd: dict) -> None:
        self.now = int(sd["now"])
        self.availability.load_state_dict(sd["availability"])


# --- a synchronous round's time -----------------------------------------------------------------
class RoundTime:
    """The time of one synchronous round that starts at the fleet's ``now``: who arrives when,
    which uploads the server keeps (the deadline, the over-selection target, availability), and
    when the round ends (:meth:`end` moves the fleet's clock there)."""

    def __init__(self, fleet: Fleet, ids: Tensor, message: dict[str, Tensor], target: int | None, round: int):
        self.fleet, self.start, self.target, self.round = fleet, fleet.now, target, round
        ids_np = ids.cpu().numpy()
        _, until = fleet.available(self.start)
        self.until = dict(zip(ids_np.tolist(), until[ids_np].tolist()))
        factor = fleet.jitter(ids_np, round)
        self.factor = dict(zip(ids_np.tolist(), np.broadcast_to(factor, ids_np.shape).tolist()))
        self.down = dict(zip(ids_np.tolist(), fleet.down(ids_np, fleet.bytes(message), factor).tolist()))
        self.deadline = self.start + int(to_ticks(fleet.opts.deadline_s)) if fleet.opts.deadline_s else None
        self.finished: list[int] = []  # when each client that trained finished its local work

    def trained(self, ids: Tensor, work: Tensor | None) -> np.ndarray:
        """When each client of a group finished its local work (ticks): the message's delivery and
        its ``work`` counted sample gradients later."""
        ids_np = ids.cpu().numpy()
        work_np = np.zeros(ids_np.size) if work is None else work.cpu().numpy()
        done = self.start + np.array([self.down[i] for i in ids_np.tolist()], dtype=np.int64) + \
            self.fleet.compute(ids_np, work_np, self._factor(ids_np))
        self.finished.extend(done.tolist())
        return done

    def _factor(self, ids_np: np.ndarray) -> np.ndarray:
        return np.array([self.factor[i] for i in ids_np.tolist()])

    def tie_breaks(self, ids: list[int]) -> dict[int, int]:
        """A seeded draw per client of the round that orders uploads arriving at the same tick
        (over-selection keeps the first K: by id, a fleet of equal devices would always keep the
        lowest ids)."""
        bits = ClientStreams.of(self.fleet.seed, "ties", self.round, torch.tensor(ids, dtype=torch.int64)).bits(1)
        return dict(zip(ids, bits[:, 0].tolist()))

    def arrivals(self, ids: Tensor, uploads: dict[str, Tensor], work: Tensor | None) -> tuple[np.ndarray, np.ndarray]:
        """(arrival ticks, delivered: in time and within the client's available period) of a group."""
        ids_np = ids.cpu().numpy()
        arrival = self.trained(ids, work) + self.fleet.up(ids_np, self.fleet.bytes(uploads, ids_np.size),
                                                          self._factor(ids_np))
        delivered = arrival <= np.array([self.until[i] for i in ids_np.tolist()], dtype=np.int64)
        if self.deadline is not None:
            delivered &= arrival <= self.deadline
        return arrival, delivered

    def end(self, kept: np.ndarray, missing: bool, reply_to: Tensor | None = None,
            reply: dict[str, Tensor] | None = None) -> None:
        """Close the round: ``kept`` the arrival ticks of the uploads it used, ``missing`` whether a
        selected client's upload never came in time (then a deadline is waited out, unless the
        over-selection target was reached); the reply's delivery to ``reply_to`` is added."""
        reached = self.target is not None and kept.size >= self.target
        if self.deadline is not None and missing and not reached:
            end = self.deadline
        elif kept.size:
            end = int(kept.max())
        else:
            end = self.start + max(self.down.values(), default=0)
        if reply and reply_to is not None and reply_to.numel():
            ids_np = reply_to.cpu().numpy()
            end += int(self.fleet.down(ids_np, self.fleet.bytes(reply), self._factor(ids_np)).max())
        self.fleet.now = max(end, self.start)

    def end_without_uploads(self) -> None:
        """Close a round in which nobody uploads (FedPD's skipped communication): it lasts until the
        last client finished its local work."""
        self.fleet.now = max([self.start, *self.finished])


# --- building it, and drawing a round's participants -----------------------------------------
def build_fleet(cfg, problem, sampler, algorithm, transport=None) -> Fleet | None:
    """The run's fleet (None without ``[system]``), every cross-check made before anything runs."""
    opts = cfg.system
    if opts is None:
        return None
    if getattr(transport, "deployed", False):
        raise ConfigError("system: a deployment runs on real devices and records measured wall time (wall_s), not "
                          "simulated time (allowed: [system] in a simulation — run.engine inprocess, loopback or "
                          "flower — or no [system] in a deployment)")
    from fedpd.threads import forward_flops  # the model's own FLOPs: 3 × forward per sample gradient

    fleet = Fleet(opts, problem, cfg.run.seed, 3.0 * forward_flops(problem))
    sampler_name = cfg.names["sampler"]
    if (opts.overselect > 1 or opts.availability != "always") and sampler_name not in ("all", "uniform", "bernoulli"):
        raise ConfigError(f"sampler.name: {sampler_name!r} cannot draw among the available clients (allowed with "
                          f"system.availability or system.overselect: all, uniform, bernoulli)")
    if opts.overselect > 1 and cfg.asynchronous is not None:
        raise ConfigError("system.overselect: over-selection closes a synchronous round; the asynchronous server "
                          "has none (allowed: overselect = 1 with [asynchronous])")
    if opts.overselect > 1 and sampler_name != "uniform":
        raise ConfigError(f"system.overselect: selects {opts.overselect:g} × K and keeps the first K, which needs "
                          f"a K (allowed: sampler.name = \"uniform\", or overselect = 1)")
    if opts.availability != "always" and algorithm.participation == "all":
        raise ConfigError(f"system.availability: algorithm '{cfg.names['algorithm']}' takes every client every "
                          f"round, which unavailable clients cannot (allowed: availability = \"always\")")
    if opts.deadline_s:
        if cfg.asynchronous is not None:
            raise ConfigError("system.deadline_s: closes a synchronous round; the asynchronous server has none "
                              "(allowed: deadline_s = 0 with [asynchronous])")
        model = problem.x_init
        nbytes = model.numel() * (opts.bytes_per_float or model.element_size())
        ids = np.arange(fleet.num_clients)
        fastest = int((fleet.down(ids, nbytes) + fleet.up(ids, nbytes)).min())
        if fastest > to_ticks(opts.deadline_s):
            raise ConfigError(f"system.deadline_s: {opts.deadline_s:g} s is shorter than the fastest client's "
                              f"download and upload of the model alone ({seconds(fastest):g} s): no upload would "
                              f"arrive (allowed: at least {seconds(fastest):g})")
    return fleet


def draw(fleet: Fleet, sampler, round: int, generator: torch.Generator) -> Tensor:
    """A round's participants: the sampler's rule applied to the clients available at the fleet's
    ``now`` (the clock waits for the next to become available when none is), K × ``overselect``
    of them for an over-selecting uniform sampler; sets the round's target K."""
    from fedpd.sampling import Bernoulli, Everyone, UniformK

    while True:
        on, until = fleet.available()
        if on.any():
            break
        nxt = int(until.min())
        if nxt >= NEVER:
            raise ConfigError("system: no client is available again (availability_file: every interval has ended)")
        fleet.now = nxt
    available = torch.from_numpy(np.flatnonzero(on))
    m = available.numel()
    fleet.target = None
    if isinstance(sampler, UniformK):
        k = min(sampler.k, m)
        # (less a hair: 1.1 × 50 is a hair above 55 in floating point, and 55 is meant)
        chosen = min(m, math.ceil(fleet.opts.overselect * sampler.k - 1e-9)) if fleet.opts.overselect > 1 else k
        fleet.target = k if fleet.opts.overselect > 1 else None
        sub = UniformK(m, chosen)
    elif isinstance(sampler, Bernoulli):
        sub = Bernoulli(m, sampler.q)
    elif isinstance(sampler, Everyone):
        sub = Everyone(m)
    else:  # any sampler while every client is available (build_fleet refuses others with availability)
        return sampler.sample(round, generator)
    return available[sub.sample(round, generator)]
