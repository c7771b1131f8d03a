"""The backdoor (Bagdasaryan et al. 2020), an attack on both the data and the uploads: a trigger
stamped on a share of the chosen parties' training samples, relabelled to a target class, when the
problem is built (:func:`fedpd.problems.poisoning.stamp_backdoor`), and their uploads scaled (model
replacement), optionally constrained to a norm, in each round. The metrics then add
``backdoor_acc`` (:mod:`fedpd.evaluation`)."""

from __future__ import annotations

import torch
from pydantic import Field

from fedpd.attacks.base import RoundAttackOptions, UpdateAttack
from fedpd.errors import ConfigError
from fedpd.ordered import ordered_norm
from fedpd.problems.base import Problem
from fedpd.problems.poisoning import num_classes, require_stored, stamp_backdoor


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


class Backdoor(UpdateAttack):
    """The backdoor by model replacement, "constrain-and-scale" (Bagdasaryan, Veit, Hua, Estrin,
    Shmatikov, "How to backdoor federated learning", AISTATS 2020, §4).

    Data, when the problem is built: of each chosen party's n_i training samples, a seeded
    ⌊poison_fraction·n_i + ½⌋ get the trigger (:func:`fedpd.problems.poisoning.apply_trigger`: a
    white square in the bottom-right corner) and the label ``target``; the party then trains on that mix of clean
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
        require_stored(problem, self.name)
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
        return stamp_backdoor(problem, ids, self.name, target, size, value, self.settings["poison_fraction"],
                              self.seed)

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
