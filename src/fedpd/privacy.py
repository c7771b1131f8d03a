"""Client-level differential privacy: DP-FedAvg's clipped, noised sum and its accountant.

``[privacy]`` (off unless ``clip`` is set) wraps the server step of any algorithm that reads its
uploads only through their means (``means_only``, :mod:`fedpd.algorithms.base`) in the
Gaussian mechanism of McMahan, Ramage, Talwar, Zhang, "Learning differentially private recurrent
language models", ICLR 2018 (DP-FedAvg, Alg. 1 with the fixed-denominator estimator f̃_f):

    Δ_i  = u_i − x0              (a model upload; an upload that is an update already: u_i)
    Δ̃_i  = Δ_i · min(1, S / ‖Δ_i‖)                     (all of a client's uploads clipped jointly)
    ū    = x0 + (Σ_{i∈P} Δ̃_i + N(0, z_Δ² S² I)) / m   (m: the sampler's expected participants)

and hands the algorithm's own server step the one "noisy mean upload" ū in place of the mean of
the uploads — the step is post-processing of the noised sum. :class:`PrivateAggregation` is that
wrapper (as Flower's DP strategies wrap a strategy): the round takes its server step through it and
the algorithm object is left as it is. Whether the guarantee holds is read from what the algorithm
declares (:class:`~fedpd.algorithms.base.Algorithm`: ``means_only``, its model, update and
statistic uploads, ``weighs_by_samples``, ``robust_aggregate``, ``reads_participant_count``,
``own_anchor``, ``uploads_step_counts``); :func:`private_aggregation` refuses the rest in one line.

``clip = "adaptive"`` moves S each round toward the ``target_quantile`` γ of the update norms
(Andrew, Thakkar, McMahan, Ramaswamy, "Differentially private learning with adaptive clipping",
NeurIPS 2021, Alg. 1), the bits b_i = 1[‖Δ_i‖ ≤ S] centred, b_i − ½, as in the authors'
implementation:

    b̄ = (Σ_i (b_i − ½) + N(0, σ_b²)) / m + ½,   S ← S · exp(−η_C (b̄ − γ)).

One client added or removed moves the count by ½ (uncentred bits would move it by 1), so the pair
(Σ Δ̃_i + N(0, z_Δ²S²I), Σ (b_i − ½) + N(0, σ_b²)) is, by their Thm. 1, one Gaussian mechanism of
noise multiplier z (``noise_multiplier``) when z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2): divided by their
noise stds, a client's two contributions have squared norm at most (S/(z_Δ S))² + (½/σ_b)² = z⁻².
Fixed clipping: z_Δ = z and no count.

Every draw comes from the server's counter-based stream ("privacy", round) of the run's seed
(:mod:`fedpd.streams`): the same noise on every engine, chunking and after a resume.

The accountant is Google's ``dp-accounting``: its RDP accountant (``accountant = "rdp"``, the
default; Mironov 2017, Mironov, Talwar, Zhang 2019) or its privacy-loss-distribution accountant
(``"pld"``; Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, "Connect the dots", PETS 2022). A round
is a subsampled Gaussian under the run's real sampler — ``bernoulli`` q: Poisson sampling
(add/remove one client); ``uniform`` K of N: sampling without replacement (replace one client,
Wang, Balle, Kasiviswanathan, AISTATS 2019: the clipped sum then moves by up to 2S and the centred
count by 1; RDP only); ``all``: the Gaussian mechanism itself (add/remove one client).
:meth:`ClientDP.mechanism` names every part under the ``dp_*`` keys each evaluation records beside
``dp_epsilon`` (docs/privacy.md), and :func:`epsilon` computes ε from those keys alone — a reader
recomputes it from the run's files.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from typing import Literal

import torch
from pydantic import Field, model_validator

from fedpd.algorithms.base import DIAGNOSTICS, METRIC_PREFIX, Algorithm, UploadMean, streams_means
from fedpd.errors import ConfigError
from fedpd.hooks import call
from fedpd.options import Options, refuse
from fedpd.ordered import ordered_sq_norm
from fedpd.solvers import GradientSolver
from fedpd.streams import ClientStreams

SAMPLERS = ("all", "uniform", "bernoulli")
#: dp-accounting's event for each sampler, and the neighbouring relation it is accounted under
SAMPLING = {"bernoulli": ("poisson", "add_or_remove_one"), "uniform": ("without_replacement", "replace_one"),
            "all": ("none", "add_or_remove_one")}
#: the PLD accountant's grid of privacy losses: its ε agrees with a 1e-4 grid's to 4 digits (3.5022 against
#: 3.5021 for q 0.05, z 1, T 100) at a tenth of the cost; the discretisation is pessimistic (an upper bound)
PLD_INTERVAL = 1e-3
#: above this ε (by RDP, at the run's last round) the PLD's grid spans more than 10⁵ points (seconds per
#: evaluation, minutes at ε in the thousands), and such an ε is no guarantee to speak of
PLD_MAX_EPSILON = 100.0
#: the noise multipliers accepted: below 1e-3 one round spends ε > 5·10⁵ (no guarantee) and the accountant
#: divides by zero near 1e-300; above 1e6 it overflows (z² near 1e308), and noise of std 10⁶·S leaves nothing
#: of the model
MIN_NOISE, MAX_NOISE = 1e-3, 1e6
#: the options only adaptive clipping reads (refused with clip = "fixed" when set to other than their default)
ADAPTIVE_ONLY = ("target_quantile", "clip_lr", "quantile_noise")


class PrivacyOptions(Options):
    clip: Literal["none", "fixed", "adaptive"] = Field(
        "none", description="none: no differential privacy; fixed: clip every client's update to clip_norm (DP-FedAvg, "
        "McMahan et al. 2018); adaptive: clip_norm follows a quantile of the update norms (Andrew et al. 2021). Any "
        "other privacy key without clip is refused (it would be ignored), and so is an adaptive-only key with fixed")
    clip_norm: float = Field(1.0, gt=0, description="S: the L2 norm every client's update is clipped to (adaptive: "
                             "its initial value)")
    noise_multiplier: float = Field(1.0, ge=0, le=MAX_NOISE, description="z: Gaussian noise of std z*S is added to "
                                    "the sum of the clipped updates (adaptive: z of the update and the quantile "
                                    "estimate together); at least 0.001")
    delta: float = Field(1e-5, gt=0, lt=1, description="the delta that dp_epsilon is reported at")
    accountant: Literal["rdp", "pld"] = Field(
        "rdp", description="how dp_epsilon is computed, by dp-accounting: rdp (Renyi DP: every sampler) or pld "
        "(privacy loss distributions: 7-15% smaller epsilon; bernoulli and all samplers)")
    target_epsilon: float = Field(0.0, ge=0, description="stop the run before the round that would spend more than "
                                  "this epsilon (below the first round's: refused); 0: run every round")
    target_quantile: float = Field(0.5, gt=0, lt=1, description="adaptive: gamma, the fraction of updates left "
                                   "unclipped that clip_norm aims for")
    clip_lr: float = Field(0.2, gt=0, le=10, description="adaptive: eta_C, the geometric step of clip_norm")
    quantile_noise: float = Field(0.0, ge=0, le=MAX_NOISE, description="adaptive: sigma_b, the noise std of the count "
                                  "of unclipped updates; 0: expected participants / 20 (Andrew et al.'s choice)")

    @model_validator(mode="after")
    def _nothing_ignored(self):
        # [privacy] without clip would run with no differential privacy and every other key unread;
        # clip = "none" written out is the off switch (a private config's non-private baseline)
        others = [k for k in type(self).model_fields if k != "clip" and k in self.model_fields_set]
        if others and "clip" not in self.model_fields_set:
            raise refuse(others[0], "set, but privacy.clip is not: the run would have no differential privacy and "
                         f"ignore it (allowed: privacy.clip = \"fixed\" or \"adaptive\", or no privacy.{others[0]})")
        adaptive = self.given(*ADAPTIVE_ONLY) if self.clip == "fixed" else []
        if adaptive:
            raise refuse(adaptive[0], "adaptive clipping's, and privacy.clip = \"fixed\" keeps clip_norm fixed, so it "
                         f"would be ignored (allowed: privacy.clip = \"adaptive\", or no privacy.{adaptive[0]})")
        return self

    @model_validator(mode="after")
    def _meaningful(self):
        if self.clip != "none" and self.noise_multiplier == 0:
            raise refuse("noise_multiplier", "0 adds no noise: clipping alone gives no differential privacy "
                         "(allowed: > 0, or privacy.clip = \"none\")")
        if self.clip != "none" and self.noise_multiplier < MIN_NOISE:
            raise refuse("noise_multiplier", f"{self.noise_multiplier:g} gives no guarantee (one round spends ε above "
                         f"5e5) and is beyond the accountant's arithmetic (allowed: {MIN_NOISE:g} to {MAX_NOISE:g})")
        return self


class ClientDP:
    """The mechanism and its accountant for one run (the options, the sampler, N). Refuses, in one
    line, a mechanism whose ε cannot be computed or whose first round already passes
    ``target_epsilon``."""

    def __init__(self, opts: PrivacyOptions, sampler_name: str, sampler, num_clients: int, seed: int, rounds: int):
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
            left = z ** -2 - (2 * self.sigma_b) ** -2  # what the count leaves of z⁻² for the update
            if left <= 0:
                raise ConfigError(f"privacy.quantile_noise: sigma_b = {self.sigma_b:g} leaves no noise for the update "
                                  f"(Andrew et al. Thm. 1 needs 2*sigma_b > z = {z:g}; allowed: > {z / 2:g})")
            self.z_update = left ** -0.5
        self._eps: dict[int, float] = {}
        self._check(rounds)

    def mechanism(self) -> dict:
        """What one round releases and how it is accounted, under the keys every evaluation records
        (docs/privacy.md, "Recomputing ε"): the noise of each part over its sensitivity is what
        dp-accounting's Gaussian event takes. Replacing a client (``uniform``) moves the clipped sum
        by up to 2S and the centred count by 1; adding or removing one, by S and ½."""
        sampling, relation = SAMPLING[self.sampler]
        scale = 2.0 if relation == "replace_one" else 1.0
        adaptive = self.opts.clip == "adaptive"
        out = {"dp_accountant": self.opts.accountant, "dp_delta": self.opts.delta, "dp_sampling": sampling,
               "dp_neighbouring": relation,
               "dp_noise_update": self.z_update, "dp_update_sensitivity": scale,  # both in units of the clip norm S
               "dp_noise_count": self.sigma_b, "dp_count_sensitivity": 0.5 * scale if adaptive else 0.0}
        if sampling == "poisson":
            out["dp_q"] = self.q
        elif sampling == "without_replacement":
            out["dp_sample_size"], out["dp_population"] = round(self.m), self.n
        return out

    # --- the accountant ----------------------------------------------------------------
    def epsilon(self, rounds: int) -> float:
        """ε at ``delta`` after ``rounds`` noised aggregations, by the run's accountant."""
        if rounds not in self._eps:
            self._eps[rounds] = epsilon(self.mechanism(), rounds)
        return self._eps[rounds]

    def round_limit(self, rounds: int) -> int:
        """The most rounds (≤ ``rounds``) whose ε stays within ``target_epsilon`` (0: ``rounds``)."""
        target = self.opts.target_epsilon
        if not target or (self.opts.accountant == "rdp" and self.epsilon(rounds) <= target):
            return rounds
        # ε grows with the rounds: hi doubles until ε(hi) > target ≥ ε(lo), so no ε far past the target is
        # computed (the PLD's cost grows with ε); ε(1) ≤ target was checked when the run was built
        lo, hi = 0, 1
        while self.epsilon(hi) <= target:
            if hi == rounds:
                return rounds
            lo, hi = hi, min(2 * hi, rounds)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.epsilon(mid) <= target else (lo, mid)
        return lo

    def _check(self, rounds: int) -> None:
        """Refuse, before anything runs, what the accountant cannot account for: uniform sampling
        under PLD, an ε too large for the PLD's grid (the target, or the whole run's by RDP, cheap at
        any ε) or one it cannot resolve (ε = inf at a tiny delta), and a ``target_epsilon`` the first
        round already passes."""
        opts = self.opts
        if opts.accountant == "pld":
            if self.sampler == "uniform":
                raise ConfigError("privacy.accountant: dp-accounting's PLD accountant has no event for sampling K of N "
                                  "without replacement (sampler \"uniform\") (allowed: accountant = \"rdp\", or "
                                  "sampler.name = \"bernoulli\" or \"all\")")
            if opts.target_epsilon > PLD_MAX_EPSILON:
                raise ConfigError(f"privacy.accountant: target_epsilon = {opts.target_epsilon:g} is beyond the ε ≤ "
                                  f"{PLD_MAX_EPSILON:g} the PLD accountant's grid is built for (allowed: accountant = "
                                  f"\"rdp\", or a smaller target_epsilon)")
            rdp = 0.0 if opts.target_epsilon else epsilon({**self.mechanism(), "dp_accountant": "rdp"}, rounds)
            if rdp > PLD_MAX_EPSILON:  # (a target stops the run first)
                raise ConfigError(f"privacy.accountant: the run's {rounds} rounds spend ε ≈ {rdp:.4g} by RDP, beyond "
                                  f"the ε ≤ {PLD_MAX_EPSILON:g} the PLD accountant's grid is built for (allowed: "
                                  f"accountant = \"rdp\", a larger noise_multiplier, fewer rounds or a "
                                  f"target_epsilon of at most {PLD_MAX_EPSILON:g})")
        if opts.accountant == "pld" or opts.target_epsilon:
            first = self.epsilon(1)
            if not math.isfinite(first):
                raise ConfigError(f"privacy.delta: {opts.delta:g} is below what the {opts.accountant} accountant "
                                  f"resolves (ε = {first} after one round) (allowed: a larger delta, or accountant = "
                                  f"\"rdp\")")
            if opts.target_epsilon and first > opts.target_epsilon:
                raise ConfigError(f"privacy.target_epsilon: {opts.target_epsilon:g} is less than one round spends "
                                  f"(ε = {first:.4g} at delta = {opts.delta:g} by {opts.accountant}), so no round "
                                  f"could run (allowed: at least {first:.4g}, or 0: no limit)")


@contextlib.contextmanager
def _quiet_absl():
    """dp-accounting logs a multi-line warning through absl for each fractional RDP order whose
    series does not converge (Poisson sampling), and leaves that order out: nothing for a user to
    act on. Warnings are held back while fedpd calls it; errors still show."""
    log = logging.getLogger("absl")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def epsilon(mechanism: dict, rounds: int) -> float:
    """ε at ``dp_delta`` after ``rounds`` rounds of ``mechanism`` (the keys of
    :meth:`ClientDP.mechanism`), by dp-accounting: each round the sampled Gaussian whose noise over
    sensitivity z combines the update's and the count's, z⁻² = Σ (sensitivity / noise)² (the two
    Gaussians as one, Andrew et al.'s Thm. 1), under the recorded sampling and relation."""
    if rounds <= 0:
        return 0.0
    try:
        import dp_accounting
        from dp_accounting.pld import PLDAccountant
        from dp_accounting.rdp import RdpAccountant
    except ImportError:
        raise ConfigError("privacy: the accountant needs dp-accounting (pip install 'fedpd[privacy]')") from None
    m = mechanism
    z = m["dp_noise_update"] / m["dp_update_sensitivity"]
    if m["dp_noise_count"]:
        z = 1 / math.hypot(1 / z, m["dp_count_sensitivity"] / m["dp_noise_count"])
    gaussian = dp_accounting.GaussianDpEvent(z)
    if m["dp_sampling"] == "poisson":
        event = dp_accounting.PoissonSampledDpEvent(m["dp_q"], gaussian)
    elif m["dp_sampling"] == "without_replacement":
        event = dp_accounting.SampledWithoutReplacementDpEvent(m["dp_population"], m["dp_sample_size"], gaussian)
    else:
        event = gaussian
    relation = dp_accounting.NeighboringRelation[m["dp_neighbouring"].upper()]
    if m["dp_accountant"] == "pld":
        accountant = PLDAccountant(relation, value_discretization_interval=PLD_INTERVAL)
    else:
        accountant = RdpAccountant(neighboring_relation=relation)
    with _quiet_absl():
        accountant.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
        return float(accountant.get_epsilon(m["dp_delta"]))


# --- the mechanism, wrapped around the algorithm's server step --------------------------------
_SUM, _DIAG, _BELOW = "dp_sum_", "dp_diag_", "dp_below"


class PrivateAggregation:
    """The mechanism around ``algorithm``'s server step, as Flower's
    ``DifferentialPrivacyServerSideFixedClipping`` wraps a strategy: the round takes its server step
    here in the algorithm's place (``aggregation`` of :func:`fedpd.protocol.run_round`), and this
    clips each accepted upload in :meth:`mean_terms`, noises their sum in :meth:`aggregate_means`
    and hands the algorithm's own ``mean_terms`` and ``aggregate_means`` the one noisy mean upload
    ū (module docstring). The algorithm object is not changed: its clients' rules run as they are.
    The server state gains the clip norm in force and the rounds composed (``dp_clip``,
    ``dp_rounds``), so a resume continues the mechanism and its accountant."""

    means_only = True  # (a round may stream the means: the clipped terms are summed as they come)

    def __init__(self, algorithm: Algorithm, dp: ClientDP):
        self.algorithm, self.dp = algorithm, dp

    def init_server(self, x0):
        server = call(self.algorithm, "init_server", x0)
        server["dp_clip"] = torch.tensor(self.dp.opts.clip_norm, dtype=torch.float64, device=x0.device)
        server["dp_rounds"] = torch.tensor(0, dtype=torch.int64, device=x0.device)
        return server

    def _is_model(self, key: str) -> bool:
        return key in self.algorithm.model_uploads

    def _keys(self, uploads) -> list[str]:
        alg = self.algorithm
        keys = [k for k in uploads if not k.startswith(METRIC_PREFIX)]
        other = [k for k in keys if k not in alg.model_uploads and k not in alg.update_uploads]
        if other:
            raise ConfigError(f"privacy.clip: algorithm '{alg.name}' uploads '{other[0]}', neither a model nor an "
                              f"update, which cannot be clipped (allowed: privacy.clip = \"none\")")
        return keys

    def mean_terms(self, server, uploads):
        keys, x0, S = self._keys(uploads), server["x0"], server["dp_clip"]
        deltas = {k: uploads[k] - x0 if self._is_model(k) else uploads[k] for k in keys}
        norm = torch.sqrt(sum(ordered_sq_norm(d.double(), 1) for d in deltas.values()))  # joint norm, [k]
        scale = torch.clamp(S / torch.clamp(norm, min=1e-300), max=1.0)
        clipped = {k: d * scale[:, None].to(d.dtype) for k, d in deltas.items()}
        terms = {_SUM + k: v for k, v in clipped.items()}
        terms[_BELOW] = (norm <= S).to(torch.float64) - 0.5  # centred: one client moves the count by ½
        row = {k: x0 + c if self._is_model(k) else c for k, c in clipped.items()}
        row.update({k: v for k, v in uploads.items() if k.startswith(METRIC_PREFIX)})
        own = self.algorithm.mean_terms(server, row)  # the diagnostics of the clipped upload
        terms.update({_DIAG + k: v for k, v in own.items() if k in DIAGNOSTICS or k.startswith(METRIC_PREFIX)})
        return terms

    def aggregate_means(self, server, means, ctx):
        dp, count, S = self.dp, ctx.ids.numel(), server["dp_clip"]
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
            row[k] = (server["x0"] + noisy if self._is_model(k) else noisy).unsqueeze(0)
        step = {k: v[0] for k, v in self.algorithm.mean_terms(server, row).items()
                if not (k in DIAGNOSTICS or k.startswith(METRIC_PREFIX))}
        step.update({k[len(_DIAG):]: v for k, v in means.items() if k.startswith(_DIAG)})
        new, reply = self.algorithm.aggregate_means(server, step, ctx)
        clip = S
        if dp.opts.clip == "adaptive":  # Andrew et al. Alg. 1: the noised fraction of unclipped updates
            below = (means[_BELOW] * count + dp.sigma_b * xi[-1].to(S.device)) / dp.m + 0.5
            clip = S * torch.exp(-dp.opts.clip_lr * (below - dp.opts.target_quantile))
        new = {**new, "dp_clip": clip, "dp_rounds": torch.tensor(ctx.round + 1, dtype=torch.int64, device=S.device)}
        return new, reply

    def aggregate(self, server, uploads, ctx):
        """The same step from the stacked uploads (a round with an update attack): the clipped terms
        summed one client at a time in id order, as a streamed round sums them."""
        mean = UploadMean(self, server)
        mean.add(uploads)
        return self.aggregate_means(server, mean.means(), ctx)

    def diagnostics(self, server):
        out = self.algorithm.diagnostics(server)
        rounds = int(server["dp_rounds"])
        out["dp_epsilon"] = self.dp.epsilon(rounds)
        out["dp_rounds"] = rounds  # T: the rounds dp_epsilon composes
        out.update(self.dp.mechanism())
        out["dp_clip_norm"] = float(server["dp_clip"])
        return out


def _refusal(algorithm: Algorithm, sampler_name: str, solver, x0: torch.Tensor) -> str:
    """Why client-level DP's guarantee would not hold for this algorithm ("" when it does), read from
    what :class:`~fedpd.algorithms.base.Algorithm` declares of its server step and uploads."""
    if algorithm.weighs_by_samples:
        return "weights = \"samples\" uploads each client's sample count unclipped (allowed: weights = \"uniform\")"
    if algorithm.robust_aggregate:
        return ("a robust aggregator (or Fed+'s aggregate) reads every upload, not their sum: the clipped sum's "
                "sensitivity bound does not hold (allowed: algorithm.aggregator = \"mean\" on a FedAvg-type rule)")
    if not algorithm.means_only:
        return ("its server step reads every upload, not only their mean (its means_only is False: e.g. Fed+'s "
                "robust aggregate, a per-row rule), so no noised sum can stand for them (allowed: a means_only rule "
                "whose step is aggregate_means, docs/extending.md)")
    if not streams_means(algorithm):
        owner = next(c for c in type(algorithm).__mro__ if "aggregate" in vars(c)).__name__
        return (f"its server step reads every upload, not only their mean ({owner}.aggregate overrides the step of a "
                f"means_only rule), so no noised sum can stand for them (allowed: override aggregate_means instead, "
                f"docs/extending.md)")
    if type(algorithm).participants is not Algorithm.participants:
        return "its rounds choose their own participants, outside the sampler the accountant assumes"
    probe = call(algorithm, "broadcast", call(algorithm, "init_server", x0))  # a plug-in's failure: one line
    if "x0" not in probe:
        sent = ", ".join(repr(k) for k in probe) or "nothing"
        anchors = "; FedPD's clients keep their own anchors" if algorithm.own_anchor else ""
        return (f"its broadcast holds no model 'x0' (it sends {sent}{anchors}), so its uploads are not relative to a "
                f"model the server sent and their change cannot be clipped")
    if algorithm.statistic_uploads:  # e.g. q-FFL's h_k
        return (f"it uploads {algorithm.statistic_uploads[0]!r}, a per-client statistic that is neither a model nor "
                f"an update, unclipped")
    steps = algorithm.uploads_step_counts and isinstance(solver, GradientSolver)
    if steps and solver.straggler_fraction > 0:
        return "with stragglers it uploads each client's step count unclipped (allowed: solver.straggler_fraction = 0)"
    if steps and solver.local_epochs > 0:
        return ("with local epochs it uploads each client's step count, which follows its data size, unclipped "
                "(allowed: solver.local_epochs = 0)")
    if sampler_name == "bernoulli" and algorithm.reads_participant_count:
        return ("its server step uses how many clients took part, which Poisson sampling makes private (allowed: "
                "sampler.name = \"uniform\" or \"all\")")
    return ""


def private_aggregation(opts: PrivacyOptions, algorithm: Algorithm, *, algorithm_name: str, sampler_name: str,
                        sampler, num_clients: int, solver, x0: torch.Tensor, seed: int,
                        rounds: int) -> PrivateAggregation | None:
    """``[privacy]``'s mechanism around ``algorithm``'s server step (None when ``opts.clip`` is
    "none"; ``x0``: the model's initial point, to see what the algorithm broadcasts). A combination
    whose guarantee would not hold, or whose ε cannot be accounted for, is refused in one line
    (ConfigError), before anything runs."""
    if opts.clip == "none":
        return None
    if sampler_name not in SAMPLERS:
        raise ConfigError(f"privacy.clip: sampler '{sampler_name}' has no accountant (allowed samplers: "
                          f"{', '.join(SAMPLERS)})")
    why = _refusal(algorithm, sampler_name, solver, x0)
    if why:
        raise ConfigError(f"privacy.clip: algorithm '{algorithm_name}': {why}")
    return PrivateAggregation(algorithm, ClientDP(opts, sampler_name, sampler, num_clients, seed, rounds))


def privatise(cfg, algorithm: Algorithm, sampler, num_clients: int, x0: torch.Tensor):
    """Deprecated (it changed the algorithm's class): :func:`private_aggregation`, whose mechanism
    wraps the server step instead. Returns that wrapper, or ``algorithm`` when privacy is off."""
    warnings.warn("fedpd.privacy.privatise is deprecated: use fedpd.privacy.private_aggregation, the mechanism "
                  "around the algorithm's server step (the algorithm keeps its class)", DeprecationWarning,
                  stacklevel=2)
    solver = cfg.entries["solver"].build(**cfg.options["solver"].model_dump())
    private = private_aggregation(cfg.options["privacy"], algorithm, algorithm_name=cfg.names["algorithm"],
                                  sampler_name=cfg.names["sampler"], sampler=sampler, num_clients=num_clients,
                                  solver=solver, x0=x0, seed=cfg.run.seed, rounds=cfg.run.rounds)
    return algorithm if private is None else private
