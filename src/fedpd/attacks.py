"""Faults and attacks, one per run, set in the config's ``[attack]`` section, and the screen that
keeps broken uploads out of every aggregate.

Who misbehaves: ``parties`` (explicit ids) or else a ``fraction`` of the N parties, the last
:func:`party_count` (fraction, N) of a permutation seeded by the attack's own ``seed`` (so the
same parties whatever the run's seed). The count is fraction · N rounded half up, and at least
one party when fraction > 0 — the rule Fed+'s MNIST-robust uses for its negated parties too.
Three families, one class each, every kind declaring its options beside itself:

* data attacks (outliers by data), applied to the chosen parties' samples when the problem is
  built: ``negate_inputs`` (x ← −x) and ``label_flip`` (class c ← C − 1 − c; ±1 labels and
  regression targets y ← −y). ``splits = "train"`` poisons the training data only; ``"both"``
  makes the party's whole distribution an outlier (Fed+'s MNIST-robust negates a party's images).
* update attacks, applied by the server side of the round (:mod:`fedpd.protocol`) to the chosen
  participants' uploads before they are screened: ``sign_flip`` (u ← r − factor·(u − r)),
  ``scale`` (u ← r + factor·(u − r)), ``gaussian`` (u ← u + std·N(0, I)), ``nan``, ``inf``, and
  five that see the round's honest uploads: ``alie`` ("a little is enough": honest mean − z·std),
  ``ipm`` (inner-product manipulation: −ε · honest mean), ``mimic`` (a copy of one honest upload,
  Karimireddy et al. 2022) and ``optimal_alie`` / ``optimal_ipm``, whose z or ε is searched each
  round against the defence in use (the run's aggregator and pre-aggregation, simulated:
  :meth:`Attack.against`).
  For uploads that are models (the algorithm's ``model_uploads``) r is the model the server sent
  this round, so the attack acts on the update; uploads that are updates already (its
  ``update_uploads``: SCAFFOLD's Δx, Δc) have r = 0; anything else (a sample count) is left alone.
* ``dropout``: the chosen participants receive the round's message and then drop out — no
  upload, no state change, counted as ``dropouts``.
* ``backdoor`` (Bagdasaryan et al. 2020) is both: a trigger stamped on a share of the chosen
  parties' training samples, relabelled to a target class, when the problem is built, and their
  uploads scaled (model replacement), optionally constrained to a norm, in each round. The
  metrics then add ``backdoor_acc`` (:mod:`fedpd.evaluation`).

With ``probability`` < 1 a chosen party misbehaves in each round independently (intermittent
faults); nothing happens before ``start_round``. The coin and the noise come from each party's
own stream (purpose "attack" or "dropout", the round, its id: :mod:`fedpd.streams`), so they do
not depend on which other parties take part, in what order, or where they run.

The screen (:func:`screen`): a row with a NaN/Inf entry, a missing key or a wrong shape is
rejected — never averaged in — and counted in the metrics as ``rejected_uploads``. A rejected
participant is treated as if it had dropped out of the round: its client state is not updated and
it gets no reply; the run goes on.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Annotated, Callable, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator
from torch import Tensor

from fedpd.errors import ConfigError
from fedpd.options import EVALS_MAX, SEED_MAX, NoOptions, Options, refuse, shown, validate
from fedpd.ordered import ordered_norm, ordered_sum
from fedpd.problems.base import ClientSplit, Problem
from fedpd.streams import ClientStreams

State = dict[str, Tensor]


def party_count(fraction: float, num_parties: int) -> int:
    """How many of ``num_parties`` a ``fraction`` names: fraction · N rounded half up (not
    Python's round, which rounds halves to even: 0.05 · 10 would name nobody), and at least one
    when fraction > 0."""
    if fraction <= 0:
        return 0
    return min(num_parties, max(1, math.floor(fraction * num_parties + 0.5 + 1e-9)))


#: the share of the parties an attack chooses when neither ``fraction`` nor ``parties`` is given
DEFAULT_FRACTION = 0.1


# --- options -----------------------------------------------------------------------------------
class TargetOptions(Options):
    fraction: float | None = Field(None, ge=0, le=1, description="share of the parties (x N rounded half up, >= 1); "
                                   f"default {DEFAULT_FRACTION} when parties is not given")
    parties: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, description="explicit party ids, each "
                                                       "once (instead of fraction)")
    seed: int = Field(0, ge=0, le=SEED_MAX, description="which parties (the attack's own seed; refused with parties, "
                      "which name them, except by the backdoor, whose samples it picks too)")

    @field_validator("parties")
    @classmethod
    def _each_once(cls, parties):
        twice = sorted({i for i in parties if parties.count(i) > 1})
        if twice:
            raise ValueError(f"party {twice[0]} named twice in {shown(parties)} (allowed: each party once)")
        return parties

    #: whether ``seed`` does anything but choose the parties (the backdoor's also picks the poisoned samples)
    seed_beyond_parties: ClassVar[bool] = False

    @model_validator(mode="after")
    def _parties_or_fraction(self):
        if self.parties and self.fraction is not None:
            raise refuse("fraction", f"attack.parties names the parties ({shown(self.parties)}); give fraction or "
                         f"parties, not both")
        if self.parties and not self.seed_beyond_parties and self.given("seed"):
            raise refuse("seed", f"chooses the parties, and attack.parties names them ({shown(self.parties)}), so it "
                         f"would be ignored (allowed: no seed, or fraction instead of parties)")
        return self


class DataAttackOptions(TargetOptions):
    splits: Literal["train", "both"] = Field("train", description="poison the training data, or test data too")


class RoundAttackOptions(TargetOptions):
    probability: float = Field(1.0, gt=0, le=1, description="chance a chosen party misbehaves in a round")
    start_round: int = Field(0, ge=0, description="first round with misbehaviour")


class SignFlipOptions(RoundAttackOptions):
    factor: float = Field(1.0, gt=0, description="u ← r − factor·(u − r)")


class ScaleOptions(RoundAttackOptions):
    factor: float = Field(10.0, description="u ← r + factor·(u − r)")


class GaussianOptions(RoundAttackOptions):
    std: float = Field(1.0, gt=0, description="standard deviation of the added noise")


# --- the kinds ---------------------------------------------------------------------------------
class Attack:
    """No faults; the base of every kind. ``bind(num_clients)`` fixes who misbehaves."""

    name: ClassVar[str] = "none"
    description: ClassVar[str] = "no faults"
    Options: ClassVar[type[Options]] = NoOptions
    family: ClassVar[str] = "none"  # none, data, update, dropout

    def __init__(self, fraction: float | None = None, parties: list | tuple = (), seed: int = 0,
                 probability: float = 1.0, start_round: int = 0, **settings):
        self.parties, self.seed = list(parties), seed
        self.fraction = (0.0 if not self.active else DEFAULT_FRACTION) if fraction is None else fraction
        self.probability, self.start_round = probability, start_round
        self.settings = settings
        self.mask: Tensor | None = None  # [N] bool: the misbehaving parties (bind)

    @property
    def active(self) -> bool:
        return self.family != "none"

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

    def bind(self, num_clients: int) -> "Attack":
        self.mask = torch.zeros(num_clients, dtype=torch.bool)
        if self.active:
            self.mask[self.targets(num_clients)] = True
        return self

    def against(self, algorithm) -> "Attack":
        """Learn the defence in use (the optimal attacks simulate it); the others need nothing."""
        return self

    def apply_data(self, problem: Problem) -> Problem:
        """The problem with the chosen parties' data transformed (data attacks), else unchanged."""
        return problem

    def misbehaving(self, ids: Tensor, round: int, rng: ClientStreams) -> Tensor:
        """[K] bool: which of the participants ``ids`` misbehave this round (their own coins)."""
        if round < self.start_round:
            return torch.zeros(ids.numel(), dtype=torch.bool)
        bad = self.mask[ids]
        if self.probability < 1:
            bad = bad & (rng.uniform() < self.probability)
        return bad

    def dropouts(self, ids: Tensor, round: int, seed: int) -> Tensor:
        """[K] bool: participants that drop out of the round after receiving its message."""
        return torch.zeros(ids.numel(), dtype=torch.bool)

    def corrupt(self, upload: State, message: State, ids: Tensor, round: int, seed: int,
                model_keys=(), update_keys=()) -> tuple[State, int]:
        """The uploads of the participants ``ids`` (rows in ids order) with the chosen parties'
        rows corrupted, and how many rows were."""
        return upload, 0


def num_classes(problem: Problem) -> int:
    """The classes of a classification problem: its own count, else one more than the largest
    label of its training and test splits."""
    classes = problem.info.get("num_classes")
    if classes is None:
        labels = [int(split.y.max()) for split in (problem.train, problem.test) if split.y.numel()]
        classes = max(labels, default=0) + 1
    return int(classes)


def _check_stored(problem: Problem, name: str) -> None:
    if not isinstance(problem.train.x, Tensor):  # samples generated on demand
        raise ConfigError(f"attack.name: {name!r} changes the data when the problem is built, and this "
                          f"problem's {problem.num_clients} clients' samples are generated on demand (allowed: "
                          f"update or dropout attacks, or fewer clients)")


class DataAttack(Attack):
    """Outliers by data: the chosen parties' samples transformed when the problem is built."""

    family = "data"
    Options = DataAttackOptions

    def apply_data(self, problem: Problem) -> Problem:
        _check_stored(problem, self.name)
        ids = self.targets(problem.num_clients)
        classes = None if problem.train.y.is_floating_point() else num_classes(problem)
        splits = self.settings.get("splits", "train")
        problem.train = transform_parties(problem.train, ids, self.name, classes)
        if splits == "both":
            problem.test = transform_parties(problem.test, ids, self.name, classes)
        problem.info = {**problem.info, "attacked_parties": ids.tolist(), "attack": self.name}
        problem.__dict__.pop("_vmapped_model", None)
        return problem


class NegateInputs(DataAttack):
    """The chosen parties' inputs negated, train split (and test with ``splits = "both"``). ByzFL has
    no counterpart."""

    name = "negate_inputs"
    description = "outliers by data: the chosen parties' inputs negated"


class LabelFlip(DataAttack):
    """The chosen parties train on flipped labels: class c of C becomes C − 1 − c (±1 labels and
    regression targets: y becomes −y), train split (and test with ``splits = "both"``). The flip is
    ByzFL's: its clients flip their targets as C − 1 − c and its ``LabelFlipping`` then sends the
    mean of the flipped gradients; here each flipping party trains on its flipped data and uploads
    its own update, as any client does."""

    name = "label_flip"
    description = "outliers by data: labels flipped (c -> C-1-c, y -> -y)"


class UpdateAttack(Attack):
    """An attack on the uploads: ``corrupted(u, ref, rng)`` maps the chosen rows of one key."""

    family = "update"
    Options = RoundAttackOptions

    def corrupt(self, upload, message, ids, round, seed, model_keys=(), update_keys=()):
        if not upload:
            return upload, 0
        rng = ClientStreams.of(seed, "attack", round, ids)
        bad = self.misbehaving(ids, round, rng)
        n = int(bad.sum())
        if n == 0:
            return upload, 0
        out = dict(upload)
        for key in sorted(upload):  # a fixed order: each key's noise is its own draw
            u = upload[key]
            if key in model_keys:
                ref = message.get("x0")
                ref = ref if ref is not None and ref.shape == u.shape[1:] else torch.zeros((), dtype=u.dtype)
            elif key in update_keys:
                ref = torch.zeros((), dtype=u.dtype)
            else:  # diagnostics, sample or step counts: not the update
                continue
            ref = ref.to(u.device)
            mask = bad.to(u.device).view(-1, *([1] * (u.dim() - 1)))
            out[key] = torch.where(mask, self.corrupted(u, ref, rng), u)
        return out, n

    def corrupted(self, u: Tensor, ref: Tensor, rng: ClientStreams) -> Tensor:
        raise NotImplementedError


class SignFlip(UpdateAttack):
    """Each Byzantine participant's own update negated about the broadcast r and scaled:
    u ← r − factor·(u − r). ByzFL's ``SignFlipping`` is another attack under that name: every
    Byzantine participant sends the negated mean of the honest updates, −mean(honest), which is
    :class:`IPM` with ε = 1 (``ipm``, ``epsilon = 1``)."""

    name = "sign_flip"
    description = "uploads: update sign flipped (times factor)"
    Options = SignFlipOptions

    def corrupted(self, u, ref, rng):
        return ref - self.settings["factor"] * (u - ref)


class Scale(UpdateAttack):
    """Each Byzantine participant's own update scaled about the broadcast r: u ← r + factor·(u − r).
    ByzFL has no counterpart."""

    name = "scale"
    description = "uploads: update scaled by factor"
    Options = ScaleOptions

    def corrupted(self, u, ref, rng):
        return ref + self.settings["factor"] * (u - ref)


class Gaussian(UpdateAttack):
    """Each Byzantine participant's own upload plus noise N(0, std²) per coordinate, drawn from the
    participant's attack stream. ByzFL's ``Gaussian(mu, sigma)`` sends a fresh N(mu, sigma²) vector
    in place of the upload, whatever it was: the noise added here has the law of ByzFL's vector
    with mu = 0 and sigma = std."""

    name = "gaussian"
    description = "uploads: Gaussian noise of std added"
    Options = GaussianOptions

    def corrupted(self, u, ref, rng):
        return u + self.settings["std"] * rng.normal(*u.shape[1:], dtype=u.dtype).to(u.device)


class NaNUpload(UpdateAttack):
    """An all-NaN upload: the server rejects it and counts it (ByzFL has no counterpart)."""

    name = "nan"
    description = "uploads: all NaN (rejected and counted)"

    def corrupted(self, u, ref, rng):
        return torch.full_like(u, float("nan"))


class InfUpload(UpdateAttack):
    """An all-+Inf upload, ByzFL's ``Inf``: the server rejects it and counts it."""

    name = "inf"
    description = "uploads: all +Inf (rejected and counted)"

    def corrupted(self, u, ref, rng):
        return torch.full_like(u, float("inf"))


class ALIEOptions(RoundAttackOptions):
    z: float | None = Field(None, gt=0, description="standard deviations to shift by; default: Baruch et al.'s "
                            "z_max from the round's n and f")


class IPMOptions(RoundAttackOptions):
    epsilon: float = Field(0.1, gt=0, description="ε: the Byzantine update is −ε · (mean honest update)")


class OmniscientAttack(UpdateAttack):
    """An update attack that sees the round's honest uploads: every chosen participant sends the
    same ``forged(honest updates)`` [d] (no randomness of its own). Choosing every client is
    refused: there would be no honest update to forge from, and no attack."""

    def bind(self, num_clients: int) -> "Attack":
        super().bind(num_clients)
        if num_clients and bool(self.mask.all()):
            key = "parties" if self.parties else "fraction"
            given = shown(self.parties) if self.parties else f"{self.fraction:g}"
            raise ConfigError(f"attack.{key}: {given} makes all {num_clients} clients Byzantine; {self.name} forges "
                              f"its upload from the honest ones, and there would be none (allowed: leave at least one "
                              f"client honest)")
        return self

    def corrupt(self, upload, message, ids, round, seed, model_keys=(), update_keys=()):
        if not upload:
            return upload, 0
        rng = ClientStreams.of(seed, "attack", round, ids)
        bad = self.misbehaving(ids, round, rng)
        n = int(bad.sum())
        if n == 0 or n == ids.numel():  # nobody to attack, or no honest upload to learn from
            return upload, 0
        out = dict(upload)
        for key in sorted(upload):
            u = upload[key]
            if key in model_keys:
                ref = message.get("x0")
                ref = ref if ref is not None and ref.shape == u.shape[1:] else torch.zeros((), dtype=u.dtype)
            elif key in update_keys:
                ref = torch.zeros((), dtype=u.dtype)
            else:
                continue
            ref = ref.to(u.device)
            honest = u[~bad.to(u.device)] - ref
            forged = ref + self.forged(honest, ids.numel(), n, rng)
            out[key] = torch.where(bad.to(u.device).view(-1, *([1] * (u.dim() - 1))), forged.expand_as(u), u)
        return out, n

    def forged(self, honest: Tensor, n: int, f: int, rng: ClientStreams | None = None) -> Tensor:
        """The update every Byzantine participant sends, from the honest updates [n − f, d] (rows
        in ascending id order) and the participants' attack streams ``rng``."""
        raise NotImplementedError


class ALIE(OmniscientAttack):
    """"A little is enough" (Baruch, Baruch, Goldberg, NeurIPS 2019, Alg. 1): each Byzantine
    participant sends μ − z·σ, the coordinate-wise mean and standard deviation of the honest
    updates of the round shifted by z deviations; z defaults to the paper's
    z_max = Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − f, for n participants of which f are Byzantine
    (the largest shift that a majority of honest coordinates still lies beyond). σ is the
    population deviation (divided by h, the honest count); ByzFL's ``ALittleIsEnough(tau)`` sends
    μ + τ·s with the sample deviation s (divided by h − 1) and τ = 1.5 by default: it equals this
    attack with z = −τ·√(h/(h − 1)) (τ = −z·√((h − 1)/h))."""

    name = "alie"
    description = "uploads: 'a little is enough' — honest mean minus z standard deviations (Baruch et al. 2019)"
    Options = ALIEOptions

    def z_of(self, n: int, f: int) -> float:
        if self.settings.get("z") is not None:
            return float(self.settings["z"])
        s = math.floor(n / 2 + 1) - f
        p = min(max((n - s) / n, 1e-6), 1 - 1e-6)
        return float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(p, dtype=torch.float64)))

    def forged(self, honest, n, f, rng=None):
        return self.shifted(honest, self.z_of(n, f))

    @staticmethod
    def line(honest: Tensor) -> Callable[[float], Tensor]:
        """z -> μ − z·σ of the honest updates (σ the population standard deviation, per
        coordinate), μ and σ computed once."""
        std = honest.std(0, unbiased=False) if honest.shape[0] > 1 else torch.zeros_like(honest[0])
        mean = honest.mean(0)
        return lambda z: mean - z * std

    @staticmethod
    def shifted(honest: Tensor, z: float) -> Tensor:
        """μ − z·σ of the honest updates."""
        return ALIE.line(honest)(z)


class IPM(OmniscientAttack):
    """Inner-product manipulation (Xie, Koyejo, Gupta, "Fall of empires: breaking Byzantine-tolerant
    SGD by inner product manipulation", UAI 2020): each Byzantine participant sends −ε times the
    mean honest update, so that the aggregate's inner product with the true direction turns
    negative (ε small: under the radar of median-type rules; ε large: against the mean). ByzFL's
    ``InnerProductManipulation(tau)`` is this attack with ε = τ (its ``SignFlipping``: ε = 1)."""

    name = "ipm"
    description = "uploads: inner-product manipulation, -epsilon x (mean honest update) (Xie et al. 2020)"
    Options = IPMOptions

    def forged(self, honest, n, f, rng=None):
        return -self.settings["epsilon"] * honest.mean(0)


class MimicOptions(RoundAttackOptions):
    index: int | None = Field(None, ge=0, description="copy the honest participant at this place in the round "
                              "(ascending id, modulo their number; ByzFL's epsilon); default: the one farthest along "
                              "the honest updates' top principal direction")


def top_direction_row(honest: Tensor) -> int:
    """The honest row farthest along the honest updates' top principal direction z:
    argmax_i |⟨x_i − μ, z⟩| (ties: the lower index). z's projections are those of the top
    eigenvector u of the Gram matrix G = (X − μ)(X − μ)ᵀ ([h, h], float64, its entries summed in
    a fixed order), since (X − μ) z ∝ G u ∝ u."""
    centred = honest - honest.mean(0)
    gram = torch.stack([ordered_sum(centred[i] * centred, dim=1, dtype=torch.float64) for i in range(honest.shape[0])])
    u = torch.linalg.eigh(gram.cpu()).eigenvectors[:, -1].abs()
    # a tie is a tie on every CPU: LAPACK's last bits differ between code paths, so rows within
    # 1e-9 of the largest projection count as tied, and the lower index wins
    return int((u >= u.max() * (1 - 1e-9)).nonzero()[0, 0])


class Mimic(OmniscientAttack):
    """Mimic (Karimireddy, He, Jaggi, "Byzantine-robust learning on heterogeneous datasets via
    bucketing", ICLR 2022, §3): every Byzantine participant sends the update of one honest
    participant i*, so that client's data are over-weighted — an attack that exploits
    heterogeneity and that no outlier test can see (every row it adds is an honest row). The paper
    picks i* = argmax_i ⟨x_i, z⟩ with z the honest updates' top principal direction, found by an
    online power method over a warm-up phase and then held fixed; fedpd keeps no attack state
    between rounds and takes, each round, the row farthest from the honest mean along the exact
    top direction (:func:`top_direction_row`, |·| because z's sign is arbitrary). With ``index``
    it copies the honest participant at that place instead (ByzFL's ``Mimic(epsilon)``)."""

    name = "mimic"
    description = "uploads: a copy of one honest update — the one along the honest top direction (Karimireddy et al. 2022)"
    Options = MimicOptions

    def forged(self, honest, n, f, rng=None):
        index = self.settings.get("index")
        i = top_direction_row(honest) if index is None else index % honest.shape[0]
        return honest[i]


class OptimalOptions(RoundAttackOptions):
    evals: int = Field(20, ge=1, le=EVALS_MAX, description="evaluations of the simulated defence per round (the line "
                       f"search); at most {EVALS_MAX}")
    start: float = Field(0.0, ge=0, description="the search's first strength")
    step: float = Field(10.0, gt=0, description="the search's first step")
    ratio: float = Field(0.8, gt=0.5, lt=1, description="each failed step shrinks the step by this factor")


def line_search(objective, start: float, step: float, ratio: float, evals: int) -> float:
    """The strength t >= ``start`` that maximises ``objective(t)`` within ``evals`` evaluations, by
    the search Allouah et al.'s optimal attacks use (as ByzFL's): expansion — from t = start, try
    t + δ; on a gain take it and double δ, else shrink δ by ``ratio`` and stop expanding;
    contraction — with what is left, try t + δ, take it on a gain, and shrink δ by ``ratio``
    after every try. (Only larger strengths are tried; ties keep the smaller.)"""
    best, value = start, objective(start)
    delta, left = step, evals - 1
    while left > 0:  # expansion
        t = best + delta
        v, left = objective(t), left - 1
        if v > value:
            best, value, delta = t, v, delta * 2
        else:
            delta *= ratio
            break
    while left > 0:  # contraction
        t = best + delta
        v, left = objective(t), left - 1
        if v > value:
            best, value = t, v
        delta *= ratio
    return best


class OptimalAttack(OmniscientAttack):
    """An omniscient attack whose strength t is searched each round (:func:`line_search`) to
    maximise ‖F(honest ∪ f copies of the forged update) − mean(honest)‖, the distance the
    defence F's output is pushed from the honest mean — knowing F: the run's aggregator with its
    pre-aggregation, simulated on the updates about 0 (:meth:`against`). The simulated rows are
    the honest updates then the f forged ones (as ByzFL's); bucketing's permutation in the
    simulation is drawn from the round's first participant's attack stream, the same for every
    strength tried."""

    Options = OptimalOptions
    simulate = None

    def against(self, algorithm) -> "Attack":
        defence = getattr(algorithm, "defence", None)
        if defence is None:
            raise ConfigError(f"attack.name: {self.name} picks its strength against the defence in use, and algorithm "
                              f"'{getattr(algorithm, 'name', algorithm)}' has no aggregator to simulate (allowed: an "
                              f"algorithm with algorithm.aggregator, e.g. fedavg, fedprox, ditto)")
        self.simulate = defence()
        return self

    def forgery(self, honest: Tensor) -> Callable[[float], Tensor]:
        """t -> the forged vector of strength t, the honest statistics it needs computed once (the
        search tries ``evals`` strengths on the same honest rows)."""
        raise NotImplementedError

    def strength(self, honest: Tensor, f: int, rng: ClientStreams | None) -> float:
        if self.simulate is None:
            raise ConfigError(f"attack.name: {self.name} has not been told the defence (Attack.against)")
        mean, vector = honest.mean(0), self.forgery(honest)
        seed = int(rng.bits(1)[0, 0] >> np.uint64(1)) if rng is not None else 0

        def pushed(t: float) -> float:
            forged = vector(t)
            rows = torch.cat([honest, forged.expand(f, -1)])
            out = self.simulate(rows, torch.Generator().manual_seed(seed))
            return float(ordered_norm(out - mean))

        s = self.settings
        return line_search(pushed, s["start"], s["step"], s["ratio"], s["evals"])

    def forged(self, honest, n, f, rng=None):
        flat = honest.reshape(honest.shape[0], -1)
        return self.forgery(flat)(self.strength(flat, f, rng)).reshape(honest.shape[1:])


class OptimalALIE(OptimalAttack):
    """ALIE with z searched against the defence (Allouah et al., "Fixing by mixing", AISTATS 2023,
    §6: the "optimal" version of Baruch et al.'s attack; ByzFL's ``Optimal_ALittleIsEnough``):
    every Byzantine participant sends μ − z·σ (:class:`ALIE`'s vector) with z the
    :class:`OptimalAttack` search's (from 0, steps 10, 20 evaluations by default). ByzFL sends
    μ + τ·σ with the sample standard deviation (n − 1); since the search scales with its steps,
    fedpd's search with step δ equals ByzFL's with delta = −δ·√((h − 1)/h), h the honest count."""

    name = "optimal_alie"
    description = "uploads: ALIE with z searched each round against the defence in use (Allouah et al. 2023)"

    def forgery(self, honest):
        return ALIE.line(honest)


class OptimalIPM(OptimalAttack):
    """IPM with ε searched against the defence (Allouah et al. 2023, §6; ByzFL's
    ``Optimal_InnerProductManipulation``): every Byzantine participant sends −ε · μ with ε the
    :class:`OptimalAttack` search's (from 0, steps 10, 20 evaluations by default)."""

    name = "optimal_ipm"
    description = "uploads: IPM with epsilon searched each round against the defence in use (Allouah et al. 2023)"

    def forgery(self, honest):
        mean = honest.mean(0)
        return lambda t: -t * mean


class BackdoorOptions(RoundAttackOptions):
    seed_beyond_parties = True  # it picks each attacker's poisoned samples too
    target: int = Field(0, ge=0, description="the backdoor's target label")
    poison_fraction: float = Field(0.5, gt=0, le=1, description="share of each attacker's training samples "
                                   "stamped with the trigger and relabelled to target (x n_i rounded half up)")
    trigger_size: int = Field(3, ge=1, description="side of the square trigger in the bottom-right corner of an "
                              "image (pixels); for vector inputs, the number of last features set")
    trigger_value: float | None = Field(None, description="the trigger's pixel value; default: the largest "
                                        "training input (white)")
    gamma: float | None = Field(None, gt=0, description="γ: upload u <- r + γ·(u − r); default: the round's "
                                "participant count n (model replacement for the mean)")
    max_norm: float | None = Field(None, gt=0, description="constrain: the scaled update γ·(u − r) clipped to "
                                   "this norm (to pass norm bounding); default: unconstrained")


def trigger_count(fraction: float, n: int) -> int:
    """How many of a party's ``n`` training samples the backdoor stamps: fraction · n rounded half up."""
    return min(n, math.floor(fraction * n + 0.5 + 1e-9))


def apply_trigger(x: Tensor, size: int, value: float) -> Tensor:
    """``x`` [n, ...] with the trigger stamped on every sample: for images (≥ 2 trailing axes:
    [n, C, H, W] or [n, H, W]) the bottom-right ``size`` × ``size`` square of every channel set to
    ``value``, for vectors [n, d] the last ``size`` features. A new tensor."""
    out = x.clone()
    if x.dim() >= 3:
        out[..., -size:, -size:] = value
    else:
        out[:, -size:] = value
    return out


class Backdoor(UpdateAttack):
    """The backdoor by model replacement, "constrain-and-scale" (Bagdasaryan, Veit, Hua, Estrin,
    Shmatikov, "How to backdoor federated learning", AISTATS 2020, §4).

    Data, when the problem is built: of each chosen party's n_i training samples, a seeded
    ⌊poison_fraction·n_i + ½⌋ get the trigger (:func:`apply_trigger`: a white square in the
    bottom-right corner) and the label ``target``; the party then trains on that mix of clean
    and backdoored samples like any other. Uploads, each round it misbehaves (``probability``,
    ``start_round``): eq. (3)'s model replacement

        L̃ = r + γ·(X − r),   γ = n/η,

    with X the party's trained model and r the model the server sent (0 for update uploads);
    γ = ``gamma``, by default n, the round's participants (the plain mean, η = 1, is then
    replaced by about X). "Constrain": with ``max_norm`` the scaled update γ·(X − r) is clipped
    to that norm, the paper's answer to a norm-bounding server (scale up to the bound only).
    The test split is left clean; ``backdoor_acc`` measures the trigger on it
    (:func:`fedpd.evaluation.evaluate_test`)."""

    name = "backdoor"
    description = ("backdoor (Bagdasaryan et al. 2020): trigger + target label on a share of the attackers' data, "
                   "their update scaled by gamma (model replacement), optionally clipped to max_norm")
    Options = BackdoorOptions

    def apply_data(self, problem: Problem) -> Problem:
        _check_stored(problem, self.name)
        train = problem.train
        if not train.x.is_floating_point() or train.y.is_floating_point():
            raise ConfigError("attack.name: backdoor needs real-valued inputs and class labels (allowed: a "
                              "classification problem with real inputs)")
        classes = num_classes(problem)
        target, size = self.settings["target"], self.settings["trigger_size"]
        if target >= classes:
            raise ConfigError(f"attack.target: {target} is not a class of this problem (allowed: 0..{classes - 1})")
        extent = train.x.shape[-1] if train.x.dim() == 2 else min(train.x.shape[-2:])
        if size > extent:
            raise ConfigError(f"attack.trigger_size: {size} exceeds the inputs' size {extent} (allowed: 1..{extent})")
        value = self.settings["trigger_value"]
        value = float(train.x.max()) if value is None else float(value)
        ids = self.targets(problem.num_clients)
        rows = poisoned_rows(train, ids, self.settings["poison_fraction"], self.seed)
        x, y = train.x.clone(), train.y.clone()
        x[rows] = apply_trigger(x[rows], size, value)
        y[rows] = target
        problem.train = replace(train, x=x, y=y)  # its class kept (e.g. augmented)
        problem.info = {**problem.info, "attacked_parties": ids.tolist(), "attack": self.name,
                        "backdoor": {"target": target, "size": size, "value": value}}
        problem.__dict__.pop("_vmapped_model", None)
        return problem

    def corrupted(self, u, ref, rng):
        gamma = self.settings["gamma"]
        step = (u - ref) * (float(u.shape[0]) if gamma is None else gamma)  # u: all K rows of the round
        bound = self.settings["max_norm"]
        if bound is not None:
            norms = ordered_norm(step.reshape(step.shape[0], -1), dim=1)
            scale = torch.where(norms > bound, bound / norms.clamp_min(torch.finfo(step.dtype).tiny),
                                torch.ones_like(norms))
            step = step * scale.view(-1, *([1] * (step.dim() - 1)))
        return ref + step


def poisoned_rows(split: ClientSplit, ids: Tensor, fraction: float, seed: int) -> Tensor:
    """The rows of ``split`` the backdoor stamps: of each party in ``ids`` (ascending), the first
    :func:`trigger_count` of a permutation of its samples drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    offsets, sizes = split.offsets.cpu(), split.sizes.cpu()
    picked = [int(offsets[i]) + torch.randperm(int(sizes[i]), generator=g)[:trigger_count(fraction, int(sizes[i]))]
              for i in ids.tolist()]
    return torch.cat(picked).sort().values if picked else torch.zeros(0, dtype=torch.int64)


class Dropout(Attack):
    """Clients that fail mid-round: they received the broadcast, send nothing back, keep their state."""

    name = "dropout"
    description = "faults: the chosen participants drop out after the broadcast (no upload, state kept)"
    family = "dropout"
    Options = RoundAttackOptions

    def dropouts(self, ids, round, seed):
        return self.misbehaving(ids, round, ClientStreams.of(seed, "dropout", round, ids))


ATTACKS = (Attack, NegateInputs, LabelFlip, SignFlip, Scale, Gaussian, NaNUpload, InfUpload, ALIE, IPM, Mimic,
           OptimalALIE, OptimalIPM, Backdoor, Dropout)


def make_attack(name: str, **options) -> Attack:
    """The attack ``name`` with ``options`` checked by its options model (defaults filled in)."""
    cls = {a.name: a for a in ATTACKS}[name]
    return cls(**validate(cls.Options, options, "attack").model_dump())


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
        raise ConfigError(f"attack.name: {kind!r} is not a data attack (allowed: negate_inputs, label_flip)")
    return ClientSplit(x, y, split.offsets)


def screen(uploads: list[State], sizes: list[int]) -> tuple[State, Tensor]:
    """Stack the uploads of several groups of clients and flag the well-formed rows.

    ``uploads[j]`` holds group j's tensors ``[sizes[j], ...]`` (a group: a chunk of an engine, a
    node's reply). Every key's expected trailing shape is the one most clients sent (a group that
    disagrees, or lacks a key, or has the wrong number of rows, is rejected whole: it cannot be
    stacked). Empties ``uploads`` as it stacks them. Returns the stacked uploads (rejected
    groups' rows filled with NaN, so the row count stays K) and a [K] bool mask of the rows that
    are well-formed and finite.
    """
    keys = Counter(k for u in uploads for k in u)
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
    for u, n in zip(uploads, sizes):
        good = all(isinstance(u.get(k), Tensor) and u[k].dim() >= 1 and u[k].shape[0] == n
                   and tuple(u[k].shape[1:]) == shapes[k] for k in kept)
        good = good and set(u) <= set(kept)
        for k in kept:
            parts[k].append(u[k] if good else torch.full((n, *shapes[k]), float("nan"), dtype=_dtype(uploads, k),
                                                         device=_device(uploads, k)))
        ok_parts.append(torch.full((n,), good, dtype=torch.bool))
    uploads.clear()  # the caller's list lets go, so each group's tensors are freed once copied
    stacked = {k: _stack(v) for k, v in parts.items()}
    ok = torch.cat(ok_parts) if ok_parts else torch.zeros(0, dtype=torch.bool)
    return stacked, ok & finite_rows(stacked, ok.numel())


def _stack(parts: list[Tensor]) -> Tensor:
    """``torch.cat(parts)``, emptying ``parts`` as it copies: K uploads of a large model are then
    held about once, not twice (the parts and their concatenation)."""
    if len({(p.dtype, p.device) for p in parts}) != 1:
        return torch.cat(parts)  # mixed types: cat's promotion rules
    out = torch.empty((sum(p.shape[0] for p in parts), *parts[0].shape[1:]), dtype=parts[0].dtype,
                      device=parts[0].device)
    row = 0
    for i, part in enumerate(parts):
        out[row:row + part.shape[0]] = part
        row += part.shape[0]
        parts[i] = None
    return out


def finite_rows(upload: State, k: int | None = None) -> Tensor:
    """[K] bool (on the CPU): rows whose every entry, in every key, is finite (all True for no keys)."""
    ok = torch.ones(k if k is not None else next(iter(upload.values())).shape[0], dtype=torch.bool)
    for t in upload.values():
        if not t.is_floating_point() or t.numel() == 0:
            continue  # integers are finite
        rows = t.reshape(t.shape[0], -1)
        # a row's max and min are finite iff every entry is (NaN propagates through both): two
        # reductions, no [K, d] temporary, ~20x faster than isfinite(rows).all(1)
        ok &= (rows.amax(1).isfinite() & rows.amin(1).isfinite()).cpu()
    return ok


def _dtype(uploads: list[State], key: str) -> torch.dtype:
    for u in uploads:
        t = u.get(key)
        if isinstance(t, Tensor) and t.is_floating_point():
            return t.dtype
    return torch.get_default_dtype()


def _device(uploads: list[State], key: str) -> torch.device:
    for u in uploads:
        t = u.get(key)
        if isinstance(t, Tensor):
            return t.device
    return torch.device("cpu")
