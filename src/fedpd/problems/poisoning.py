"""Data poisoning: chosen parties' samples changed when the problem is built — inputs negated,
labels flipped, a backdoor trigger stamped on a share of them — and the rule that turns a
fraction of the parties into a count.

The data attacks (:mod:`fedpd.attacks`) choose the parties and the options, then call these; a
problem (Fed+'s MNIST-robust negates its last parties) and the evaluation (the backdoor's
success: the same trigger on the test inputs) read them here, beside the data, without importing
any attack.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from fedpd.errors import ConfigError
from fedpd.problems.base import ClientSplit, Problem


def party_count(fraction: float, num_parties: int) -> int:
    """How many of ``num_parties`` a ``fraction`` names: fraction · N rounded half up (not
    Python's round, which rounds halves to even: 0.05 · 10 would name nobody), and at least one
    when fraction > 0."""
    if fraction <= 0:
        return 0
    return min(num_parties, max(1, math.floor(fraction * num_parties + 0.5 + 1e-9)))


def num_classes(problem: Problem) -> int:
    """The classes of a classification problem: its own count, else one more than the largest
    label of its training and test splits."""
    classes = problem.info.get("num_classes")
    if classes is None:
        labels = [int(split.y.max()) for split in (problem.train, problem.test) if split.y.numel()]
        classes = max(labels, default=0) + 1
    return int(classes)


def require_stored(problem: Problem, name: str) -> None:
    """Refuse poisoning (by the attack ``name``) a problem whose samples are generated on demand."""
    if not isinstance(problem.train.x, Tensor):
        raise ConfigError(f"attack.name: {name!r} changes the data when the problem is built, and this "
                          f"problem's {problem.num_clients} clients' samples are generated on demand (allowed: "
                          f"update or dropout attacks, or fewer clients)")


def transform_parties(split: ClientSplit, ids: Tensor, kind: str, num_classes: int | None = None) -> ClientSplit:
    """``split`` with the samples of parties ``ids`` negated (``negate_inputs``) or label-flipped
    (``label_flip``: class c of C becomes C − 1 − c; ±1 labels and regression targets y become −y)."""
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


def poison_parties(problem: Problem, ids: Tensor, kind: str, splits: str = "train") -> Problem:
    """``problem`` with parties ``ids``' samples transformed (:func:`transform_parties`), in the
    training split, and in the test split too with ``splits = "both"``."""
    classes = None if problem.train.y.is_floating_point() else num_classes(problem)
    problem.train = transform_parties(problem.train, ids, kind, classes)
    if splits == "both":
        problem.test = transform_parties(problem.test, ids, kind, classes)
    return _poisoned(problem, {"attacked_parties": ids.tolist(), "attack": kind})


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


def poisoned_rows(split: ClientSplit, ids: Tensor, fraction: float, seed: int) -> Tensor:
    """The rows of ``split`` the backdoor stamps: of each party in ``ids`` (ascending), the first
    :func:`trigger_count` of a permutation of its samples drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    offsets, sizes = split.offsets.cpu(), split.sizes.cpu()
    picked = [int(offsets[i]) + torch.randperm(int(sizes[i]), generator=g)[:trigger_count(fraction, int(sizes[i]))]
              for i in ids.tolist()]
    return torch.cat(picked).sort().values if picked else torch.zeros(0, dtype=torch.int64)


def stamp_backdoor(problem: Problem, ids: Tensor, name: str, target: int, size: int, value: float,
                   fraction: float, seed: int) -> Problem:
    """``problem`` with the backdoor planted by the attack ``name``: of each party in ``ids``,
    the :func:`poisoned_rows` of its training samples stamped (:func:`apply_trigger`) and
    relabelled ``target``; the trigger recorded in ``problem.info["backdoor"]`` for the
    evaluation. The test split is left clean."""
    train = problem.train
    rows = poisoned_rows(train, ids, fraction, seed)
    x, y = train.x.clone(), train.y.clone()
    x[rows] = apply_trigger(x[rows], size, value)
    y[rows] = target
    problem.train = replace(train, x=x, y=y)  # its class kept (e.g. augmented)
    return _poisoned(problem, {"attacked_parties": ids.tolist(), "attack": name,
                               "backdoor": {"target": target, "size": size, "value": value}})


def _poisoned(problem: Problem, info: dict) -> Problem:
    problem.info = {**problem.info, **info}
    problem.__dict__.pop("_vmapped_model", None)
    return problem
