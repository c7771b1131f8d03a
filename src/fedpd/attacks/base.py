"""The base of every attack: who misbehaves (``parties`` or a ``fraction``, the attack's own
``seed``), in which rounds (``probability``, ``start_round``), and the one loop that corrupts the
chosen participants' uploads (:class:`UpdateAttack`), which the update, fault, backdoor and
optimal attacks share."""

from __future__ import annotations

from typing import Annotated, ClassVar

import torch
from pydantic import Field, field_validator, model_validator
from torch import Tensor

from fedpd.errors import ConfigError
from fedpd.options import SEED_MAX, NoOptions, Options, refuse, shown
from fedpd.problems.base import Problem
from fedpd.problems.poisoning import party_count
from fedpd.streams import ClientStreams

State = dict[str, Tensor]

#: the share of the parties an attack chooses when neither ``fraction`` nor ``parties`` is given
DEFAULT_FRACTION = 0.1


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


class RoundAttackOptions(TargetOptions):
    probability: float = Field(1.0, gt=0, le=1, description="chance a chosen party misbehaves in a round")
    start_round: int = Field(0, ge=0, description="first round with misbehaviour")


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

    def against(self, defence) -> "Attack":
        """Learn the defence in use — the run's :class:`fedpd.defence.Defence`, None where the
        algorithm takes none — which the optimal attacks simulate; the others need nothing."""
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


class UpdateAttack(Attack):
    """An attack on the uploads: in each round, the misbehaving participants' rows of every model
    or update key replaced by :meth:`attacked`'s — by default ``corrupted(u, ref, rng)``, a map of
    the rows of one key about its reference r (the model the server sent for a model upload, 0 for
    an update upload; other keys, such as sample counts, are left alone)."""

    family = "update"
    Options = RoundAttackOptions
    #: the forged rows are computed from the round's honest ones: a round where every participant
    #: misbehaves has none to learn from and is left alone
    needs_honest: ClassVar[bool] = False

    def corrupt(self, upload, message, ids, round, seed, model_keys=(), update_keys=()):
        if not upload:
            return upload, 0
        rng = ClientStreams.of(seed, "attack", round, ids)
        bad = self.misbehaving(ids, round, rng)
        n = int(bad.sum())
        if n == 0 or (self.needs_honest and n == ids.numel()):
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
            ref, mask = ref.to(u.device), bad.to(u.device)
            out[key] = torch.where(mask.view(-1, *([1] * (u.dim() - 1))), self.attacked(u, ref, mask, n, rng), u)
        return out, n

    def attacked(self, u: Tensor, ref: Tensor, bad: Tensor, f: int, rng: ClientStreams) -> Tensor:
        """The rows [K, ...] to send in place of ``u`` [K, ...] (only those of the ``f``
        misbehaving participants, ``bad`` [K], are kept)."""
        return self.corrupted(u, ref, rng)

    def corrupted(self, u: Tensor, ref: Tensor, rng: ClientStreams) -> Tensor:
        raise NotImplementedError


class OmniscientAttack(UpdateAttack):
    """An update attack that sees the round's honest uploads: every chosen participant sends the
    same ``forged(honest updates)`` [d] (no randomness of its own). Choosing every client is
    refused: there would be no honest update to forge from, and no attack."""

    needs_honest = True

    def bind(self, num_clients: int) -> "Attack":
        super().bind(num_clients)
        if num_clients and bool(self.mask.all()):
            key = "parties" if self.parties else "fraction"
            given = shown(self.parties) if self.parties else f"{self.fraction:g}"
            raise ConfigError(f"attack.{key}: {given} makes all {num_clients} clients Byzantine; {self.name} forges "
                              f"its upload from the honest ones, and there would be none (allowed: leave at least one "
                              f"client honest)")
        return self

    def attacked(self, u, ref, bad, f, rng):
        honest = u[~bad] - ref
        return (ref + self.forged(honest, bad.numel(), f, rng)).expand_as(u)

    def forged(self, honest: Tensor, n: int, f: int, rng: ClientStreams | None = None) -> Tensor:
        """The update every Byzantine participant sends, from the honest updates [n − f, d] (rows
        in ascending id order) and the participants' attack streams ``rng``."""
        raise NotImplementedError
