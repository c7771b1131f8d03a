"""Data attacks (outliers by data): the chosen parties' samples transformed when the problem is
built (:mod:`fedpd.problems.poisoning` does the transforming) — ``negate_inputs`` (x ← −x) and
``label_flip`` (class c ← C − 1 − c; ±1 labels and regression targets y ← −y). ``splits =
"train"`` poisons the training data only; ``"both"`` makes the party's whole distribution an
outlier (Fed+'s MNIST-robust negates a party's images)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedpd.attacks.base import Attack, TargetOptions
from fedpd.problems.base import Problem
from fedpd.problems.poisoning import poison_parties, require_stored


class DataAttackOptions(TargetOptions):
    splits: Literal["train", "both"] = Field("train", description="poison the training data, or test data too")


class DataAttack(Attack):
    """Outliers by data: the chosen parties' samples transformed when the problem is built."""

    family = "data"
    Options = DataAttackOptions

    def apply_data(self, problem: Problem) -> Problem:
        require_stored(problem, self.name)
        ids = self.targets(problem.num_clients)
        return poison_parties(problem, ids, self.name, self.settings.get("splits", "train"))


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
