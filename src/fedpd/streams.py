"""Random streams that depend only on who draws, not on how the run is executed.

Every random draw of a run comes from a stream named by (run seed, purpose, round) and, for a
client's draws, the client's id — after FedJAX, which splits one key per client. The streams are
counter-based: the value at position c of a stream is a hash of (its key, c), so nothing has to
be carried between rounds or written to a checkpoint beyond the seed and the round, and a client
draws the same numbers whether it runs alone, with others in one vectorised call, in any order,
on another process or on a GPU.

The hash is SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
OOPSLA 2014): key_i + c·γ through a 64-bit finaliser, in numpy's wrapping uint64 arithmetic.
Sub-streams (:meth:`ClientStreams.child`) re-key by hashing a label in, so a draw can be
addressed by what it is for (the batch of local step q) rather than by how many draws came
before it — which would depend on the other clients of a vectorised chunk.

Purposes used by fedpd (a new purpose never disturbs the existing ones):

    server:  "sampler" (who takes part), "communication" (FedPD's coin),
             "eval_clients" (round 0: the clients run.eval_clients evaluates),
             "eval_train_samples" (round 0: the training samples run.eval_train_samples evaluates),
             "privacy" ([privacy]'s noise on the round's clipped sum, fedpd.privacy),
             "pre_aggregation" (bucketing's permutation: fedpd.preaggregators)
    problem: "synthetic" (client k's data, keyed by the problem's seed: fedpd.problems.lazy)
    client:  "batches" (minibatches, their augmentation, SAGA's sample choice),
             "stragglers" (local step counts), "attack" (update attacks' coin and noise; the
             optimal attacks' simulated bucketing: the stream of the round's first participant),
             "dropout" (clients that drop out of a round)
    fleet:   "system" (round 0: each client's speed, bandwidths, latency, device class),
             "availability" (round 0: client k's on/off periods, period j at position j + 1):
             fedpd.system
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import Tensor

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # 2^64 / golden ratio, SplitMix64's increment
_LABEL = 0xD1B54A32D192ED03  # a second odd constant: labels must not walk along the position axis
_U64 = np.uint64


def _mix_int(z: int) -> int:
    """SplitMix64's finaliser on a Python int (exact, for keys)."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, element-wise on uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def _code(label) -> int:
    """A 64-bit code for a stream label: ints as themselves, strings by a stable hash."""
    if isinstance(label, str):
        return int.from_bytes(hashlib.blake2b(label.encode(), digest_size=8).digest(), "little")
    return int(label) & _MASK


def base_key(seed: int, purpose: str, round: int) -> int:
    """The key of (seed, purpose, round): each label hashed in turn."""
    key = _mix_int(_code(seed) * _GAMMA + 1)
    for label in (purpose, round):
        key = _mix_int(key ^ _mix_int(_code(label) * _LABEL + _GAMMA))
    return key


def server_generator(seed: int, purpose: str, round: int) -> torch.Generator:
    """A torch generator for the server's draws of (purpose, round), e.g. the sampler's."""
    return torch.Generator().manual_seed(base_key(seed, purpose, round) & ((1 << 63) - 1))


class ClientStreams:
    """One counter-based stream per client of ``ids``; draws come out as [K, *shape] tensors.

    Row k of every draw depends only on (key of client k, position): the same client gives the
    same numbers whatever the other rows are."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys  # uint64 [K]
        self.position = 0

    @classmethod
    def of(cls, seed: int, purpose: str, round: int, ids: Tensor) -> "ClientStreams":
        base = _U64(base_key(seed, purpose, round))
        client = ids.detach().cpu().numpy().astype(np.uint64)
        return cls(_mix(base + (client + _U64(1)) * _U64(_GAMMA)))

    def __len__(self) -> int:
        return len(self.keys)

    def child(self, *labels) -> "ClientStreams":
        """An independent stream per client for ``labels`` (e.g. the local step), at position 0."""
        keys = self.keys
        for label in labels:
            keys = _mix(keys ^ _U64(_mix_int(_code(label) * _LABEL + _GAMMA)))
        return ClientStreams(keys)

    def children(self, labels) -> "ClientStreams":
        """``child(label)`` for every label at once: one stream per (client k, label l), in rows
        k·L + l, so a single draw gives every label's numbers — the same numbers each child
        would draw alone (the solver draws the batches of all Q local steps so)."""
        codes = np.array([_mix_int(_code(label) * _LABEL + _GAMMA) for label in labels], dtype=np.uint64)
        return ClientStreams(_mix(self.keys[:, None] ^ codes[None, :]).reshape(-1))

    def select(self, rows: Tensor) -> "ClientStreams":
        """The streams of some of the clients (``rows``: indices or a bool mask), same position."""
        out = ClientStreams(self.keys[rows.cpu().numpy()])
        out.position = self.position
        return out

    def bits(self, *shape: int) -> np.ndarray:
        """The next prod(shape) 64-bit words of each stream: uint64 [K, *shape]."""
        n = int(np.prod(shape, dtype=np.int64))
        counter = np.arange(self.position + 1, self.position + n + 1, dtype=np.uint64)
        self.position += n
        z = self.keys[:, None] + counter[None, :] * _U64(_GAMMA)
        return _mix(z).reshape(len(self.keys), *shape)

    def uniform(self, *shape: int) -> Tensor:
        """Uniform on [0, 1), float64 [K, *shape] (53 random bits each)."""
        return torch.from_numpy((self.bits(*shape) >> _U64(11)).astype(np.float64) * 2.0**-53)

    def uniform_at(self, positions: np.ndarray) -> np.ndarray:
        """One uniform on [0, 1) per stream, stream k's at its own position ``positions[k]`` (≥ 1;
        the value ``uniform`` would give there), float64 numpy [K]; the streams' position stays."""
        z = self.keys + np.asarray(positions, dtype=np.uint64) * _U64(_GAMMA)
        return (_mix(z) >> _U64(11)).astype(np.float64) * 2.0**-53

    def randint(self, low: int, high: int, *shape: int) -> Tensor:
        """Integers uniform on [low, high), int64 [K, *shape]."""
        return low + (self.uniform(*shape) * (high - low)).long()

    def normal(self, *shape: int, dtype: torch.dtype = torch.float64) -> Tensor:
        """Standard normal (Box–Muller), [K, *shape] in ``dtype``."""
        u1, u2 = self.uniform(*shape), self.uniform(*shape)
        z = torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2 * torch.pi * u2)
        return z.to(dtype)
