"""Faults and attacks, one per run, set in the config's ``[attack]`` section, and the screen that
keeps broken uploads out of every aggregate.

Who misbehaves: ``parties`` (explicit ids) or else a ``fraction`` of the N parties, the last
:func:`party_count` (fraction, N) of a permutation seeded by the attack's own ``seed`` (so the
same parties whatever the run's seed). The count is fraction · N rounded half up, and at least
one party when fraction > 0 — the rule Fed+'s MNIST-robust uses for its negated parties too. Two families:

* data attacks (outliers by data), applied to the chosen parties' samples when the problem is
  built: ``negate_inputs`` (x ← −x) and ``label_flip`` (class c ← C − 1 − c; ±1 labels and
  regression targets y ← −y). ``splits = "train"`` poisons the training data only; ``"both"``
  makes the party's whole distribution an outlier (Fed+'s MNIST-robust negates a party's images).
* update attacks, applied by the engine to the chosen participants' uploads before they are
  screened: ``sign_flip`` (u ← r − factor·(u − r)), ``scale`` (u ← r + factor·(u − r)),
  ``gaussian`` (u ← u + std·N(0, I)), ``nan``, ``inf``. For uploads that are models (the
  algorithm's ``model_uploads``) r is the model the server sent this round, so the attack acts on
  the update; other uploads (SCAFFOLD's Δx, Δc) are updates already and r = 0. With
  ``probability`` < 1 a chosen party misbehaves in each round independently (intermittent faults);
  nothing happens before ``start_round``. Random draws use the run's seeded ``attack`` stream, so
  resuming a checkpoint replays them exactly.

The screen (:func:`screen`): a row with a NaN/Inf entry, a missing key or a wrong shape is
rejected — never averaged in — and counted in the metrics as ``rejected_uploads``. A rejected
participant is treated as if it had dropped out of the round: its client state is not updated and
it gets no reply; the run goes on.
"""

from __future__ import annotations

import math
from collections import Counter

import torch
from torch import Tensor

from fedpd.errors import ConfigError
from fedpd.problems.base import ClientSplit, Problem

DATA_KINDS = ("negate_inputs", "label_flip")
UPDATE_KINDS = ("sign_flip", "scale", "gaussian", "nan", "inf")
KINDS = ("none", *DATA_KINDS, *UPDATE_KINDS)

State = dict[str, Tensor]


def party_count(fraction: float, num_parties: int) -> int:
    """How many of ``num_parties`` a ``fraction`` names: fraction · N rounded half up (not
    Python's round, which rounds halves to even: 0.05 · 10 would name nobody), and at least one
    when fraction > 0."""
    if fraction <= 0:
        return 0
    return min(num_parties, max(1, math.floor(fraction * num_parties + 0.5 + 1e-9)))


class Attack:
    """A configured fault: ``kind`` (one of KINDS) and who / when / how strong."""

    def __init__(self, kind: str = "none", fraction: float = 0.0, parties: list | tuple = (), seed: int = 0,
                 probability: float = 1.0, start_round: int = 0, factor: float = 1.0, std: float = 1.0,
                 splits: str = "train"):
        if kind not in KINDS:
            raise ConfigError(f"attack.name: unknown attack {kind!r} (allowed: {', '.join(KINDS)})")
        if not 0 <= fraction <= 1:
            raise ConfigError(f"attack.fraction: must lie in [0, 1] (got {fraction!r})")
        if splits not in ("train", "both"):
            raise ConfigError(f"attack.splits: {splits!r} (allowed: train, both)")
        self.kind, self.fraction, self.parties, self.seed = kind, fraction, list(parties), seed
        self.probability, self.start_round, self.factor, self.std, self.splits = probability, start_round, factor, std, splits
        self.generator: torch.Generator | None = None  # the run's "attack" stream (bound by the runner)
        self.mask: Tensor | None = None  # [N] bool: the misbehaving parties (bound by the runner)

    @property
    def active(self) -> bool:
        return self.kind != "none"

    def targets(self, num_clients: int) -> Tensor:
        """The misbehaving parties, sorted int64."""
        if self.parties:
            ids = torch.tensor(self.parties, dtype=torch.int64)
            if int(ids.min()) < 0 or int(ids.max()) >= num_clients:
                raise ConfigError(f"attack.parties: ids must lie in 0..{num_clients - 1} (got {self.parties})")
            return ids.unique()
        m = party_count(self.fraction, num_clients)
        perm = torch.randperm(num_clients, generator=torch.Generator().manual_seed(self.seed))
        return perm[num_clients - m:].sort().values

    def bind(self, num_clients: int, generator: torch.Generator) -> "Attack":
        self.mask = torch.zeros(num_clients, dtype=torch.bool)
        if self.active:
            self.mask[self.targets(num_clients)] = True
        self.generator = generator
        return self

    # --- data attacks ---------------------------------------------------------------------
    def apply_data(self, problem: Problem) -> Problem:
        """The problem with the chosen parties' data transformed (a data attack), else unchanged."""
        if self.kind not in DATA_KINDS:
            return problem
        ids = self.targets(problem.num_clients)
        classes = problem.info.get("num_classes")
        if classes is None and not problem.train.y.is_floating_point():
            classes = int(max(problem.train.y.max(), problem.test.y.max(initial=0))) + 1
        problem.train = transform_parties(problem.train, ids, self.kind, classes)
        if self.splits == "both":
            problem.test = transform_parties(problem.test, ids, self.kind, classes)
        problem.info = {**problem.info, "attacked_parties": ids.tolist(), "attack": self.kind}
        problem.__dict__.pop("_vmapped_grad", None)
        return problem

    # --- update attacks -------------------------------------------------------------------
    def corrupt(self, upload: State, message: State, ids: Tensor, round: int, model_keys) -> tuple[State, int]:
        """The uploads of the participants ``ids`` with the chosen parties' rows corrupted, and how
        many rows were."""
        if self.kind not in UPDATE_KINDS or round < self.start_round or not upload:
            return upload, 0
        bad = self.mask[ids]
        if self.probability < 1:
            bad = bad & (torch.rand(ids.numel(), generator=self.generator) < self.probability)
        n = int(bad.sum())
        if n == 0:
            return upload, 0
        out = {}
        for key, u in upload.items():
            if key.startswith("metric_"):  # diagnostics, not part of the protocol
                out[key] = u
                continue
            ref = message.get("x0") if key in model_keys else None
            if ref is None or ref.shape != u.shape[1:]:
                ref = torch.zeros((), dtype=u.dtype)
            out[key] = torch.where(bad.view(-1, *([1] * (u.dim() - 1))), self._corrupt(u, ref), u)
        return out, n

    def _corrupt(self, u: Tensor, ref: Tensor) -> Tensor:
        if self.kind == "sign_flip":
            return ref - self.factor * (u - ref)
        if self.kind == "scale":
            return ref + self.factor * (u - ref)
        if self.kind == "gaussian":
            return u + self.std * torch.randn(u.shape, generator=self.generator, dtype=u.dtype)
        return torch.full_like(u, float("nan") if self.kind == "nan" else float("inf"))


def transform_parties(split: ClientSplit, ids: Tensor, kind: str, num_classes: int | None = None) -> ClientSplit:
    """``split`` with the samples of parties ``ids`` negated (``negate_inputs``) or label-flipped."""
    owner = split.owner
    hit = torch.isin(owner, ids)
    x, y = split.x, split.y
    if kind == "negate_inputs":
        if not x.is_floating_point():
            raise ConfigError("attack.name: negate_inputs needs real-valued inputs (this problem's are integers)")
        x = torch.where(hit.view(-1, *([1] * (x.dim() - 1))), -x, x)
    elif kind == "label_flip":
        if y.is_floating_point():  # ±1 labels and regression targets
            y = torch.where(hit, -y, y)
        else:
            c = num_classes if num_classes is not None else int(y.max()) + 1
            y = torch.where(hit, c - 1 - y, y)
    else:
        raise ConfigError(f"attack.name: {kind!r} is not a data attack (allowed: {', '.join(DATA_KINDS)})")
    return ClientSplit(x, y, split.offsets)


def screen(uploads: list[State], sizes: list[int]) -> tuple[State, Tensor]:
    """Stack the uploads of several chunks of clients and flag the well-formed rows.

    ``uploads[j]`` holds chunk j's tensors ``[sizes[j], ...]``. Every key's expected trailing shape
    is the one most clients sent (a chunk that disagrees, or lacks a key, or has the wrong number
    of rows, is rejected whole: it cannot be stacked). Returns the stacked uploads of the chunks
    that could be stacked (their rejected rows filled with NaN, so the row count stays K) and a
    [K] bool mask of the rows that are well-formed and finite.
    """
    keys = Counter(k for u in uploads for k in u)
    n_chunks = len(uploads)
    shapes: dict[str, tuple] = {}
    for key in keys:
        votes = Counter()
        for u, n in zip(uploads, sizes):
            t = u.get(key)
            if isinstance(t, Tensor) and t.dim() >= 1 and t.shape[0] == n:
                votes[tuple(t.shape[1:])] += n
        if votes:
            shapes[key] = votes.most_common(1)[0][0]
    # keys most clients did not send are not part of the message
    total = sum(sizes)
    kept = [k for k in shapes if sum(n for u, n in zip(uploads, sizes) if k in u) * 2 > total]
    parts: dict[str, list[Tensor]] = {k: [] for k in kept}
    ok_parts = []
    for j in range(n_chunks):
        u, n = uploads[j], sizes[j]
        good = all(isinstance(u.get(k), Tensor) and u[k].dim() >= 1 and u[k].shape[0] == n
                   and tuple(u[k].shape[1:]) == shapes[k] for k in kept)
        good = good and set(u) <= set(kept)
        for k in kept:
            parts[k].append(u[k] if good else torch.full((n, *shapes[k]), float("nan"), dtype=_dtype(uploads, k)))
        ok_parts.append(torch.full((n,), good, dtype=torch.bool))
    stacked = {k: torch.cat(v) for k, v in parts.items()}
    ok = torch.cat(ok_parts) if ok_parts else torch.zeros(0, dtype=torch.bool)
    return stacked, ok & finite_rows(stacked, ok.numel())


def finite_rows(upload: State, k: int | None = None) -> Tensor:
    """[K] bool: rows whose every entry, in every key, is finite (all True for no keys)."""
    ok = torch.ones(k if k is not None else next(iter(upload.values())).shape[0], dtype=torch.bool)
    for t in upload.values():
        ok &= torch.isfinite(t.reshape(t.shape[0], -1)).all(1)
    return ok


def _dtype(uploads: list[State], key: str) -> torch.dtype:
    for u in uploads:
        t = u.get(key)
        if isinstance(t, Tensor) and t.is_floating_point():
            return t.dtype
    return torch.get_default_dtype()
