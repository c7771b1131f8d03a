"""What travels between a server and a node: a kind, plain config values and named arrays.

An :class:`Envelope` maps one-to-one onto a Flower message (``ConfigRecord`` + ``ArrayRecord``);
the loopback transport passes it as it is. Arrays are numpy (float64 and int64 survive Flower's
transport bit-exactly); keys are namespaced: ``m/`` the algorithm's broadcast, ``u/`` a node's
uploads (stacked over its clients), ``r/`` the server's reply, ``s/`` client states (evaluation).

Kinds, server → node (the node answers each with an envelope of the same kind):

    hello    → config {"hosted": [client ids]}
    train    {"round", "ids", "prune"} + m/…  → {"ids", "sample_grads"} + u/…
    commit   {"round", "accepted"} + r/…      → {}
    restore  {"rounds"}                       → {}  (0: the run starts, fresh states; else roll
                                                    back to the checkpoint's round)
    states   {"key"}                          → {"ids"} + s/<key> (evaluation path, not counted)
    seed     {"rounds", "ids"} + s/…          → {}  (a run that moves to these nodes on resume:
                                                    clients ids take these states as version
                                                    rounds, :mod:`fedpd.handover`; not counted)

Every request also carries ``config`` (the run's resolved TOML) and ``run-key`` (which run's
states, :mod:`fedpd.remote.filestore`), so a node needs nothing but its own node config (the
clients it hosts, where it keeps their state). In a deployment a round's commit rides with the
node's next train, restore or states request instead (``commit-round``, ``commit-accepted`` and
the reply's ``r/…``; the node applies it first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

KINDS = ("hello", "train", "commit", "restore", "states", "seed")


@dataclass
class Envelope:
    kind: str
    config: dict = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


def pack(prefix: str, state: dict[str, Tensor]) -> dict[str, np.ndarray]:
    """Tensors as numpy arrays under ``prefix``/key (CPU copies; dtype and shape kept)."""
    return {f"{prefix}/{k}": v.detach().cpu().numpy().copy() for k, v in state.items()}


def unpack(prefix: str, arrays: dict[str, np.ndarray], device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """The tensors packed under ``prefix`` (on ``device``)."""
    start = len(prefix) + 1
    return {
        k[start:]: torch.from_numpy(np.array(v)).to(device) for k, v in arrays.items() if k.startswith(prefix + "/")
    }


def client_ranges(ids) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8" (as a node config's hosted-clients says them)."""
    ids, parts = sorted(int(i) for i in ids), []
    for i in ids:
        if parts and parts[-1][1] == i - 1:
            parts[-1][1] = i
        else:
            parts.append([i, i])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in parts)
