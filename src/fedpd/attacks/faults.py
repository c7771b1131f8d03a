"""Faults: uploads that are not numbers (``nan``, ``inf``: the screen rejects and counts them,
:mod:`fedpd.screen`) and clients that drop out mid-round (``dropout``)."""

from __future__ import annotations

import torch

from fedpd.attacks.base import Attack, RoundAttackOptions, UpdateAttack
from fedpd.streams import ClientStreams


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


class Dropout(Attack):
    """Clients that fail mid-round: they received the broadcast, send nothing back, keep their state."""

    name = "dropout"
    description = "faults: the chosen participants drop out after the broadcast (no upload, state kept)"
    family = "dropout"
    Options = RoundAttackOptions

    def dropouts(self, ids, round, seed):
        return self.misbehaving(ids, round, ClientStreams.of(seed, "dropout", round, ids))
