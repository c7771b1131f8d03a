"""ByzFL (EPFL's library; the README's test command installs it without its dependencies) as an
independent reference: where the definitions match, fedpd's aggregators, pre-aggregators and
attacks give ByzFL's outputs on random rows; where they differ (each difference is stated in
fedpd's docstrings), the test maps one onto the other and says how. ByzFL is called directly, never through fedpd.

ByzFL's package ``__init__`` imports its benchmark, which needs a torchvision built for the installed
torch (the index's torchvision does not load beside torch's CPU build); its aggregators and attacks
need only torch, numpy and scipy, so they are imported without the benchmark (helpers.import_byzfl)."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

from fedpd.aggregators import (centered_clipping, coordinate_median, geometric_median, krum, make_aggregator, mean,
                               norm_bounding, trimmed_mean)
from fedpd.algorithms import FedAvg
from fedpd.attacks import ALIE, make_attack
from fedpd.defence import build_defence
from fedpd.preaggregators import arc, bucketing, nnm
from fedpd.problems.base import ClientSplit
from fedpd.problems.poisoning import transform_parties
from fedpd.streams import ClientStreams
from helpers import import_byzfl


B = None


@pytest.fixture(scope="module", autouse=True)
def byzfl():
    global B
    B = import_byzfl()


def rows(seed: int, n: int = 11, d: int = 6) -> torch.Tensor:
    return torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


SEEDS = range(2)
close = torch.testing.assert_close


def theirs(rule, w: torch.Tensor) -> torch.Tensor:
    """ByzFL's ``rule`` on a copy of ``w`` as a float64 numpy array (on torch tensors ByzFL computes in
    float32; ARC and Clipping change their input in place)."""
    return torch.as_tensor(rule(w.numpy().copy()))


# --- aggregators ----------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_mean_trimmed_mean_and_median(seed):
    w = rows(seed)
    close(mean(w)[0], theirs(B.Average(), w))
    for f in (1, 3):
        close(trimmed_mean(w, f / w.shape[0])[0], theirs(B.TrMean(f), w))
    # ByzFL's Median is torch.median on tensors (the lower middle value for even n) and numpy's
    # (the mean of the two middle values, fedpd's) on arrays
    for n in (11, 10):
        v = w[:n]
        close(coordinate_median(v)[0], torch.from_numpy(B.Median()(v.numpy().copy())))


@pytest.mark.parametrize("seed", SEEDS)
def test_krum_counts_one_neighbour_more_in_byzfl(seed):
    """Blanchard et al.'s score sums the n − f − 2 nearest; ByzFL's averages the n − f − 1 nearest:
    fedpd's Krum with f − 1 is ByzFL's with f (Krum and multi-Krum of n − f rows)."""
    w = rows(seed)
    for f in (1, 3):
        close(krum(w, f - 1)[0], theirs(B.Krum(f), w))
        close(krum(w, f - 1, m=w.shape[0] - f)[0], theirs(B.MultiKrum(f), w))


@pytest.mark.parametrize("seed", SEEDS)
def test_geometric_median_at_convergence(seed):
    """ByzFL runs T smoothed Weiszfeld steps from 0, fedpd from the mean until converged: both reach the
    geometric median."""
    w = rows(seed)
    close(geometric_median(w, tol=1e-12, max_iter=10_000)[0], theirs(B.GeometricMedian(nu=1e-10, T=3000), w),
          rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
def test_centered_clipping_and_norm_bounding_about_zero(seed):
    """ByzFL's CenteredClipping starts from 0 (then from its last output, a state fedpd's algorithms
    keep as the reference); static Clipping then Average is norm bounding."""
    w = rows(seed)
    for tau, L in ((0.5, 1), (1.5, 3)):
        close(centered_clipping(w, tau, L)[0], theirs(B.CenteredClipping(tau=tau, L=L), w))
        close(norm_bounding(w, tau)[0], theirs(lambda v: B.Average()(B.Clipping(c=tau)(v)), w))


# --- pre-aggregators ------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_nnm(seed):
    w = rows(seed)
    for f in (1, 4):
        close(nnm(w, f), theirs(B.NNM(f), w))


@pytest.mark.parametrize("seed", SEEDS)
def test_bucketing_with_the_same_permutation(seed):
    """ByzFL permutes with torch's global generator; fedpd with the generator it is given: seeded alike,
    they draw the same permutation and make the same buckets (the last one short)."""
    w = rows(seed)
    for s in (2, 3):
        torch.manual_seed(100 + seed)
        made = B.Bucketing(s)(w.float())  # on a tensor, to draw from torch's generator (in float32)
        close(bucketing(w.float(), s, torch.Generator().manual_seed(100 + seed)), made)


@pytest.mark.parametrize("seed", SEEDS)
def test_arc(seed):
    """ByzFL computes k = int(2f/n·(n − f)) in floating point, fedpd 2f(n − f) // n in integers (the
    same here); ByzFL clips the raw rows (reference 0)."""
    w = rows(seed) * torch.linspace(0.5, 3, 11, dtype=torch.float64)[:, None]
    for f in (1, 3, 5):
        close(arc(w, f), theirs(B.ARC(f), w))


# --- attacks --------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_ipm_alie_and_mimic(seed):
    honest = rows(seed, n=8)
    h = honest.shape[0]
    close(make_attack("ipm", epsilon=0.7).forged(honest, 10, 2), theirs(B.InnerProductManipulation(tau=0.7), honest))
    # ByzFL: μ + τ·σ with the sample σ; fedpd: μ − z·σ with the population σ: τ = −z·√((h − 1)/h)
    z = 1.3
    close(ALIE.shifted(honest, z), theirs(B.ALittleIsEnough(tau=-z * math.sqrt((h - 1) / h)), honest))
    close(make_attack("mimic", index=3).forged(honest, 10, 2), theirs(B.Mimic(epsilon=3), honest))


@pytest.mark.parametrize("seed", SEEDS)
def test_byzfls_sign_flipping_is_ipm_at_epsilon_one_and_its_inf_is_fedpds(seed):
    """ByzFL's SignFlipping sends −mean(honest): fedpd's IPM with ε = 1. fedpd's sign_flip negates each
    attacker's own update instead (its docstring says so)."""
    honest = rows(seed, n=8)
    close(make_attack("ipm", epsilon=1.0).forged(honest, 10, 2), theirs(B.SignFlipping(), honest))
    about_zero = torch.zeros((), dtype=torch.float64)
    close(make_attack("sign_flip").corrupted(honest, about_zero, None), -honest)
    assert not torch.allclose(-honest, theirs(B.SignFlipping(), honest).expand_as(honest))
    close(make_attack("inf").corrupted(honest[:1], about_zero, None)[0], theirs(B.Inf(), honest))


def test_gaussian_noise_has_the_law_of_byzfls_gaussian():
    """fedpd adds N(0, std²) to the attacker's upload, ByzFL sends a fresh N(mu, sigma²) vector: the noise
    fedpd adds and ByzFL's vector with mu = 0, sigma = std are one law (two-sample Kolmogorov–Smirnov on
    200 000 draws each; the same test tells a variance of std² from it)."""
    from scipy import stats

    d, std = 200_000, 2.5
    upload = rows(3, n=1, d=d)
    streams = ClientStreams.of(0, "attack", 0, torch.tensor([0]))
    ours = (make_attack("gaussian", std=std).corrupted(upload, torch.zeros((), dtype=torch.float64), streams)
            - upload)[0].numpy()
    state = np.random.get_state()
    np.random.seed(0)  # ByzFL draws from numpy's global generator on arrays
    try:
        their = np.asarray(B.Gaussian(0.0, std)(upload.numpy().copy()))
    finally:
        np.random.set_state(state)
    assert stats.ks_2samp(ours, their).pvalue > 0.01
    assert stats.ks_2samp(ours, their * std).pvalue < 1e-6


def _byzfl_client(loader, momentum: float = 0.0):
    """ByzFL's own client (its fed_framework) with its MNIST logistic regression."""
    framework = importlib.import_module("byzfl.fed_framework")
    return framework.Client({"model_name": "logreg_mnist", "device": "cpu", "loss_name": "CrossEntropyLoss",
                             "LabelFlipping": True, "nb_labels": 10, "momentum": momentum,
                             "training_dataloader": loader, "store_per_client_metrics": False})


def test_label_flip_flips_as_byzfls_clients_do():
    """ByzFL's client computes a gradient on its flipped targets (what its LabelFlipping sends the mean of);
    the same model's gradient on fedpd's label-flipped data is that gradient."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(32, 1, 28, 28, generator=g), torch.randint(0, 10, (32,), generator=g)
    client = _byzfl_client(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32))
    client.compute_gradients()
    their = client.get_flat_flipped_gradients().clone()
    flipped = transform_parties(ClientSplit(x, y, torch.tensor([0, 32])), torch.tensor([0]), "label_flip", 10).y
    assert not torch.equal(flipped, y)
    model = client.model.eval()
    model.zero_grad()
    torch.nn.CrossEntropyLoss()(model(x), flipped).backward()
    close(torch.cat([p.grad.reshape(-1) for p in model.parameters()]), their)


def test_client_momentum_as_byzfls_clients_keep_it():
    """ByzFL's client keeps m ← β m + (1 − β) g of its gradients; fedpd's client momentum keeps the same of
    its updates Δ = x − x0 and uploads x0 + m (fedpd.algorithms.robust). The same updates, three rounds."""
    beta = 0.9
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(1, 784), torch.zeros(1).long()))
    client = _byzfl_client(loader, momentum=beta)
    params = list(client.model.parameters())
    g = torch.Generator().manual_seed(5)
    d = sum(p.numel() for p in params)
    x0, state = torch.randn(d, generator=g), {"m": torch.zeros(d)}
    algorithm = FedAvg(build_defence("trimmed_mean", {"trim_ratio": 0.2}, client_momentum=beta))
    for _ in range(3):
        delta = torch.randn(d, generator=g)
        for p, part in zip(params, delta.split([p.numel() for p in params])):
            p.grad = part.reshape(p.shape).clone()
        their = client.get_flat_gradients_with_momentum().clone()
        upload, state = algorithm.with_momentum({"x": x0 + delta}, {"x0": x0}, state, {})
        close(state["m"], their)
        close(upload["x"], x0 + their)


DEFENCES = [  # (fedpd's aggregator and options, ByzFL's rule and pre-aggregators), f = 3 of n = 11
    (("trimmed_mean", {"trim_ratio": 3 / 11}), lambda: (B.TrMean(3), [])),
    (("trimmed_mean", {"trim_ratio": 3 / 11, "pre": "nnm", "n_byzantine": 3}), lambda: (B.TrMean(3), [B.NNM(3)])),
    (("coordinate_median", {"pre": ["arc", "nnm"], "n_byzantine": 3}), lambda: (B.Median(), [B.ARC(3), B.NNM(3)])),
]


@pytest.mark.parametrize("defence", range(len(DEFENCES)))
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_optimal_attacks_search_as_byzfl_does(defence, seed):
    (name, options), their_defence = DEFENCES[defence]
    honest = rows(seed, n=8) + 0.5  # a mean away from 0, so IPM has a direction
    f, h = 3, 8
    agg, pre = their_defence()
    for kind in ("optimal_ipm", "optimal_alie"):
        attack = make_attack(kind).against(build_defence(name, options))
        ours = attack.forged(honest, h + f, f)
        # ALIE: the search scales with its step, so fedpd's step 10 is ByzFL's −10·√((h − 1)/h)
        step = 10.0 if kind == "optimal_ipm" else -10.0 * math.sqrt((h - 1) / h)
        cls = B.Optimal_InnerProductManipulation if kind == "optimal_ipm" else B.Optimal_ALittleIsEnough
        close(ours, theirs(cls(agg=agg, pre_agg_list=pre, f=f, delta=step), honest), rtol=1e-6, atol=1e-8)


def test_the_chain_equals_byzfls_composition():
    w = rows(7)
    ours = make_aggregator("trimmed_mean", trim_ratio=3 / 11, pre=["arc", "nnm"], n_byzantine=3)(w)[0]
    close(ours, theirs(lambda v: B.TrMean(3)(B.NNM(3)(B.ARC(3)(v))), w))
    assert np.isfinite(ours.numpy()).all()
