"""Client-level differential privacy: DP-FedAvg's clipped, noised sum and its accountant.

``[privacy]`` (off unless ``clip`` is set) turns the server step of any algorithm that reads its
uploads only through their means (``means_only``, :mod:`fedpd.algorithms.base`) into the
Gaussian mechanism of McMahan, Ramage, Talwar, Zhang, "Learning differentially private recurrent
language models", ICLR 2018 (DP-FedAvg, Alg. 1 with the fixed-denominator estimator f̃_f):

    Δ_i  = u_i − x0              (a model upload; an upload that is an update already: u_i)
    Δ̃_i  = Δ_i · min(1, S / ‖Δ_i‖)                     (all of a client's uploads clipped jointly)
    ū    = x0 + (Σ_{i∈P} Δ̃_i + N(0, z_Δ² S² I)) / m   (m: the sampler's expected participants)

and hands the algorithm's own server step the one "noisy mean upload" ū in place of the mean of
the uploads — the step is post-processing of the noised sum. ``clip = "adaptive"`` moves S each
round toward the ``target_quantile`` γ of the update norms (Andrew, Thakkar, McMahan, Ramaswamy,
"Differentially private learning with adaptive clipping", NeurIPS 2021, Alg. 1):

    b̄ = (Σ_i 1[‖Δ_i‖ ≤ S] + N(0, σ_b²)) / m,   S ← S · exp(−η_C (b̄ − γ)),

and, by their Thm. 1, the update noise z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) makes the pair the Gaussian
mechanism of noise multiplier z (``noise_multiplier``). Fixed clipping: z_Δ = z.

Every draw comes from the server's counter-based stream ("privacy", round) of the run's seed
(:mod:`fedpd.streams`): the same noise on every engine, chunking and after a resume.

The accountant is Google's ``dp-accounting`` (RDP; Mironov 2017, Mironov, Talwar, Zhang 2019):
the round is a subsampled Gaussian under the run's real sampler — ``bernoulli`` q: Poisson
sampling (add/remove one client; noise multiplier z); ``uniform`` K of N: sampling without
replacement (replace one client, Wang, Balle, Kasiviswanathan, AISTATS 2019 — the sum's
sensitivity is then 2S, so the event's noise multiplier is z/2); ``all``: the Gaussian
mechanism itself. ε at ``delta`` after T rounds is reported as ``dp_epsilon``.
"""

from __future__ import annotations

import logging
from typing import Literal

import torch
from pydantic import Field, model_validator

from fedpd.algorithms.base import DIAGNOSTICS, METRIC_PREFIX, Algorithm, streams_means
from fedpd.errors import ConfigError
from fedpd.options import Options, refuse
from fedpd.ordered import ordered_sq_norm
from fedpd.streams import ClientStreams

SAMPLERS = ("all", "uniform", "bernoulli")


class PrivacyOptions(Options):
    clip: Literal["none", "fixed", "adaptive"] = Field(
        "none", description="none: no differential privacy; fixed: clip every client's update to clip_norm (DP-FedAvg, "
        "McMahan et al. 2018); adaptive: clip_norm follows a quantile of the update norms (Andrew et al. 2021)")
    clip_norm: float = Field(1.0, gt=0, description="S: the L2 norm every client's update is clipped to (adaptive: "
                             "its initial value)")
    noise_multiplier: float = Field(1.0, ge=0, description="z: Gaussian noise of std z*S is added to the sum of the "
                                    "clipped updates (adaptive: z of the update and the quantile estimate together)")
    delta: float = Field(1e-5, gt=0, lt=1, description="the delta that dp_epsilon is reported at")
    target_epsilon: float = Field(0.0, ge=0, description="stop the run before the round that would spend more than "
                                  "this epsilon; 0: run every round")
    target_quantile: float = Field(0.5, gt=0, lt=1, description="adaptive: gamma, the fraction of updates left "
                                   "unclipped that clip_norm aims for")
    clip_lr: float = Field(0.2, gt=0, description="adaptive: eta_C, the geometric step of clip_norm")
    quantile_noise: float = Field(0.0, ge=0, description="adaptive: sigma_b, the noise std of the count of unclipped "
                                  "updates; 0: expected participants / 20 (Andrew et al.'s choice)")

    @model_validator(mode="after")
    def _meaningful(self):
        if self.clip != "none" and self.noise_multiplier == 0:
            raise refuse("noise_multiplier", "0 adds no noise: clipping alone gives no differential privacy "
                         "(allowed: > 0, or privacy.clip = \"none\")")
        return self


class ClientDP:
    """The mechanism and its accountant for one run (the options, the sampler, N)."""

    def __init__(self, opts: PrivacyOptions, sampler_name: str, sampler, num_clients: int, seed: int):
        self.opts, self.seed, self.n = opts, seed, num_clients
        self.sampler = sampler_name
        if sampler_name == "bernoulli":
            self.q, self.m = float(sampler.q), float(sampler.q) * num_clients
        elif sampler_name == "uniform":
            self.q, self.m = sampler.k / num_clients, float(sampler.k)
        else:
            self.q, self.m = 1.0, float(num_clients)
        z = opts.noise_multiplier
        self.z_update, self.sigma_b = z, 0.0
        if opts.clip == "adaptive":
            self.sigma_b = opts.quantile_noise or self.m / 20
            if 2 * self.sigma_b <= z:
                raise ConfigError(f"privacy.quantile_noise: sigma_b = {self.sigma_b:g} leaves no noise for the update "
                                  f"(Andrew et al. Thm. 1 needs 2*sigma_b > z = {z:g}; allowed: > {z / 2:g})")
            self.z_update = (z ** -2 - (2 * self.sigma_b) ** -2) ** -0.5
        self._eps: dict[int, float] = {}

    # --- the accountant ----------------------------------------------------------------
    def epsilon(self, rounds: int) -> float:
        """ε at ``delta`` after ``rounds`` noised aggregations (dp-accounting's RDP accountant)."""
        if rounds <= 0:
            return 0.0
        if rounds not in self._eps:
            self._eps[rounds] = epsilon(self.sampler, self.opts.noise_multiplier, rounds, self.opts.delta,
                                        num_clients=self.n, q=self.q, k=round(self.m))
        return self._eps[rounds]

    def round_limit(self, rounds: int) -> int:
        """The most rounds (≤ ``rounds``) whose ε stays within ``target_epsilon`` (0: ``rounds``)."""
        target = self.opts.target_epsilon
        if not target or self.epsilon(rounds) <= target:
            return rounds
        lo, hi = 0, rounds  # ε(lo) ≤ target < ε(hi); ε grows with the rounds
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.epsilon(mid) <= target else (lo, mid)
        return lo


def epsilon(sampler: str, z: float, rounds: int, delta: float, *, num_clients: int, q: float = 1.0,
            k: int = 0) -> float:
    """ε at ``delta`` of ``rounds`` subsampled Gaussian rounds of noise multiplier ``z`` (noise std
    over the clip norm) under ``sampler``, by dp-accounting's RDP accountant."""
    try:
        import dp_accounting
        from dp_accounting.rdp import RdpAccountant
    except ImportError:
        raise ConfigError("privacy: the accountant needs dp-accounting (pip install 'fedpd[privacy]')") from None
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if sampler == "bernoulli":
        event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    elif sampler == "uniform":  # replace one: the sum moves by up to 2S, so z/2 per unit sensitivity
        relation = dp_accounting.NeighboringRelation.REPLACE_ONE
        event = dp_accounting.SampledWithoutReplacementDpEvent(num_clients, k, dp_accounting.GaussianDpEvent(z / 2))
    else:
        event = dp_accounting.GaussianDpEvent(z)
    accountant = RdpAccountant(neighboring_relation=relation)
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
    quiet = logging.getLogger("absl")  # a fractional order that does not converge is left out, with a warning each
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return float(accountant.get_epsilon(delta))
    finally:
        quiet.setLevel(level)


# --- the mechanism, as a subclass of the run's algorithm ------------------------------------
_SUM, _DIAG, _BELOW = "dp_sum_", "dp_diag_", "dp_below"


class _Private:
    """Placed before the algorithm's class in the MRO (:func:`privatise`): clips each accepted
    upload in ``mean_terms``, noises the sum in ``aggregate_means`` and hands the algorithm's own
    ``mean_terms``/``aggregate_means`` the one noisy mean upload ū (module docstring)."""

    _dp: ClientDP

    def init_server(self, x0):
        server = super().init_server(x0)
        server["dp_clip"] = torch.tensor(self._dp.opts.clip_norm, dtype=torch.float64, device=x0.device)
        server["dp_rounds"] = torch.tensor(0, dtype=torch.int64, device=x0.device)
        return server

    def _keys(self, uploads) -> list[str]:
        keys = [k for k in uploads if not k.startswith(METRIC_PREFIX)]
        other = [k for k in keys if k not in self.model_uploads and k not in self.update_uploads]
        if other:
            raise ConfigError(f"privacy.clip: algorithm '{self.name}' uploads '{other[0]}', neither a model nor an "
                              f"update, which cannot be clipped (allowed: privacy.clip = \"none\")")
        return keys

    def mean_terms(self, server, uploads):
        keys, x0, S = self._keys(uploads), server["x0"], server["dp_clip"]
        deltas = {k: uploads[k] - x0 if k in self.model_uploads else uploads[k] for k in keys}
        norm = torch.sqrt(sum(ordered_sq_norm(d.double(), 1) for d in deltas.values()))  # joint norm, [k]
        scale = torch.clamp(S / torch.clamp(norm, min=1e-300), max=1.0)
        clipped = {k: d * scale[:, None].to(d.dtype) for k, d in deltas.items()}
        terms = {_SUM + k: v for k, v in clipped.items()}
        terms[_BELOW] = (norm <= S).to(torch.float64)
        row = {k: x0 + c if k in self.model_uploads else c for k, c in clipped.items()}
        row.update({k: v for k, v in uploads.items() if k.startswith(METRIC_PREFIX)})
        own = super().mean_terms(server, row)  # the diagnostics of the clipped upload
        terms.update({_DIAG + k: v for k, v in own.items() if k in DIAGNOSTICS or k.startswith(METRIC_PREFIX)})
        return terms

    def aggregate_means(self, server, means, ctx):
        dp, count, S = self._dp, ctx.ids.numel(), server["dp_clip"]
        keys = [k[len(_SUM):] for k in means if k.startswith(_SUM)]
        sizes = [means[_SUM + k].numel() for k in keys]
        server_row = torch.zeros(1, dtype=torch.int64)  # one stream: the server's ("privacy", round)
        xi = ClientStreams.of(dp.seed, "privacy", ctx.round, server_row).normal(sum(sizes) + 1)[0]
        noise = dict(zip(keys, xi[:-1].split(sizes)))
        row = {}
        for k in keys:
            total = means[_SUM + k] * count
            e = noise[k].to(total.device).reshape(total.shape)
            noisy = (total + (dp.z_update * S * e).to(total.dtype)) / dp.m
            row[k] = (server["x0"] + noisy if k in self.model_uploads else noisy).unsqueeze(0)
        step = {k: v[0] for k, v in super().mean_terms(server, row).items()
                if not (k in DIAGNOSTICS or k.startswith(METRIC_PREFIX))}
        step.update({k[len(_DIAG):]: v for k, v in means.items() if k.startswith(_DIAG)})
        new, reply = super().aggregate_means(server, step, ctx)
        clip = S
        if dp.opts.clip == "adaptive":  # Andrew et al. Alg. 1: the noised fraction of unclipped updates
            below = (means[_BELOW] * count + dp.sigma_b * xi[-1].to(S.device)) / dp.m
            clip = S * torch.exp(-dp.opts.clip_lr * (below - dp.opts.target_quantile))
        new = {**new, "dp_clip": clip, "dp_rounds": torch.tensor(ctx.round + 1, dtype=torch.int64, device=S.device)}
        return new, reply

    def diagnostics(self, server):
        out = super().diagnostics(server)
        out["dp_epsilon"] = self._dp.epsilon(int(server["dp_rounds"]))
        out["dp_clip_norm"] = float(server["dp_clip"])
        return out


def _refusal(algorithm: Algorithm, sampler_name: str, x0: torch.Tensor) -> str:
    """Why client-level DP's guarantee would not hold for this algorithm ("" when it does)."""
    if getattr(algorithm, "weights", "uniform") == "samples":
        return "weights = \"samples\" uploads each client's sample count unclipped (allowed: weights = \"uniform\")"
    if getattr(algorithm, "robust", None) is not None:
        return ("a robust aggregator (or Fed+'s aggregate) reads every upload, not their sum: the clipped sum's "
                "sensitivity bound does not hold (allowed: algorithm.aggregator = \"mean\" on a FedAvg-type rule)")
    if not streams_means(algorithm):
        return ("its server step reads every upload, not only their mean (e.g. Fed+'s robust aggregate, a per-row "
                "rule), so no noised sum can stand for them")
    if type(algorithm).participants is not Algorithm.participants:
        return "its rounds choose their own participants, outside the sampler the accountant assumes"
    probe = algorithm.broadcast(algorithm.init_server(x0))
    if "x0" not in probe:
        return ("its uploads are not relative to a model the server sent (FedPD's clients keep their own anchors), "
                "so their change cannot be clipped")
    statistics = getattr(algorithm, "statistic_uploads", ())  # e.g. q-FFL's h_k
    if statistics:
        return f"it uploads {statistics[0]!r}, a per-client statistic that is neither a model nor an update, unclipped"
    if getattr(getattr(algorithm, "local_solver", None), "straggler_fraction", 0) > 0:
        return "with stragglers it uploads each client's step count unclipped (allowed: solver.straggler_fraction = 0)"
    if getattr(getattr(algorithm, "local_solver", None), "local_epochs", 0) > 0:
        return ("with local epochs it uploads each client's step count, which follows its data size, unclipped "
                "(allowed: solver.local_epochs = 0)")
    if sampler_name == "bernoulli" and getattr(algorithm, "reads_participant_count", False):
        return ("its server step uses how many clients took part, which Poisson sampling makes private (allowed: "
                "sampler.name = \"uniform\" or \"all\")")
    return ""


def privatise(cfg, algorithm: Algorithm, sampler, num_clients: int, x0: torch.Tensor) -> Algorithm:
    """``algorithm`` with ``[privacy]`` applied (itself when ``privacy.clip = "none"``; ``x0``: the
    model's initial point, to see what the algorithm broadcasts); a
    combination whose guarantee would not hold is refused in one line (ConfigError)."""
    opts: PrivacyOptions = cfg.options["privacy"]
    if opts.clip == "none":
        return algorithm
    name = cfg.names["sampler"]
    if name not in SAMPLERS:
        raise ConfigError(f"privacy.clip: sampler '{name}' has no accountant (allowed samplers: {', '.join(SAMPLERS)})")
    why = _refusal(algorithm, name, x0)
    if why:
        raise ConfigError(f"privacy.clip: algorithm '{cfg.names['algorithm']}': {why}")
    if isinstance(algorithm, _Private):
        return algorithm
    dp = ClientDP(opts, name, sampler, num_clients, cfg.run.seed)  # refuses an adaptive sigma_b too small
    cls = type(algorithm)
    algorithm.__class__ = type(f"Private{cls.__name__}", (_Private, cls), {"__module__": cls.__module__})
    algorithm._dp = dp
    return algorithm

