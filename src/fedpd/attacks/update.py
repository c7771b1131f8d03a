"""Update attacks: the chosen participants' uploads changed in each round they misbehave —
their own update flipped, scaled or noised (``sign_flip``, ``scale``, ``gaussian``), or forged
from the round's honest updates (``alie``, ``ipm``, ``mimic``: :class:`OmniscientAttack`)."""

from __future__ import annotations

import math
from typing import Callable

import torch
from pydantic import Field
from torch import Tensor

from fedpd.attacks.base import OmniscientAttack, RoundAttackOptions, UpdateAttack
from fedpd.ordered import ordered_sum


class SignFlipOptions(RoundAttackOptions):
    factor: float = Field(1.0, gt=0, description="u ← r − factor·(u − r)")


class ScaleOptions(RoundAttackOptions):
    factor: float = Field(10.0, description="u ← r + factor·(u − r)")


class GaussianOptions(RoundAttackOptions):
    std: float = Field(1.0, gt=0, description="standard deviation of the added noise")


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


class ALIEOptions(RoundAttackOptions):
    z: float | None = Field(None, gt=0, description="standard deviations to shift by; default: Baruch et al.'s "
                            "z_max from the round's n and f")


class IPMOptions(RoundAttackOptions):
    epsilon: float = Field(0.1, gt=0, description="ε: the Byzantine update is −ε · (mean honest update)")


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
    description = ("uploads: a copy of one honest update — the one along the honest top direction "
                   "(Karimireddy et al. 2022)")
    Options = MimicOptions

    def forged(self, honest, n, f, rng=None):
        index = self.settings.get("index")
        i = top_direction_row(honest) if index is None else index % honest.shape[0]
        return honest[i]
