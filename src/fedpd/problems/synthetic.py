"""Problems generated in code, seeded: FedPD's logistic regression, FedProx's Synthetic(α, β),
and least squares (which has an exact local solver, for tests)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import nn

from fedpd.flat import FlatModel
from fedpd.options import Options, SEED_MAX, declares, refuse
from fedpd.problems import losses
from fedpd.problems.base import ClientSplit, Problem
from fedpd.problems import lazy as on_demand
from fedpd.problems.lazy import ClientSource, check_eager, check_memory, client_generators, sizes_numbers


def _split(parts_x, parts_y, n_train: list[int]):
    """Each client's first n_train[i] samples train, the rest test."""
    tr = ClientSplit.from_parts([x[:n] for x, n in zip(parts_x, n_train)], [y[:n] for y, n in zip(parts_y, n_train)])
    te = ClientSplit.from_parts([x[n:] for x, n in zip(parts_x, n_train)], [y[n:] for y, n in zip(parts_y, n_train)])
    return tr, te


class FedPDLogregOptions(Options):
    clients: int = Field(100, ge=1, description='number of clients (parties)')
    samples_per_client: int = Field(400, ge=1, description='training samples per client')
    test_samples_per_client: int = Field(100, ge=0, description='test samples per client')
    dim: int = Field(20, ge=2, description="features, the last a constant 1")
    non_iid: Literal["weak", "strong"] = Field("strong", description="weak: one ground truth; strong: one per agent")
    heterogeneity: float | None = Field(None, ge=0, le=1, description="instead of non_iid: agent truth (1 - h) shared "
                                        "+ h own (0: one truth, 1: as strong); FedPD's p-vs-heterogeneity study")
    penalty_lambda: float = Field(0.1, ge=0, description="λ of the non-convex penalty")
    penalty_alpha: float = Field(1.0, gt=0, description="α of the non-convex penalty")
    label_noise: float = Field(1.0, ge=0, description='std of the noise added before the sign of the labels')
    seed: int = Field(0, ge=0, le=SEED_MAX, description="seed of the data (and of the model's initialisation)")

    @model_validator(mode="after")
    def _truth_once(self):
        if self.heterogeneity is not None and self.given("non_iid"):
            raise refuse("non_iid", "heterogeneity sets the agents' truths instead, so it would be ignored (allowed: "
                         "no non_iid, or no heterogeneity)")
        return self


@declares("fedpd_logreg", FedPDLogregOptions,
          "FedPD §5 (Zhang et al. 2021): non-convex penalised logistic regression, 100 agents x 400 samples, d = 20")
def fedpd_logreg(
    *,
    clients: int = 100,
    samples_per_client: int = 400,
    test_samples_per_client: int = 100,
    dim: int = 20,
    non_iid: str = "strong",
    heterogeneity: float | None = None,
    penalty_lambda: float = 0.1,
    penalty_alpha: float = 1.0,
    label_noise: float = 1.0,
    seed: int = 0,
) -> Problem:
    """FedPD §5 / App. H: non-convex penalised logistic regression.

    Features: dim − 1 standard normals plus a constant 1. Labels b = sign(aᵀx* + noise) with
    x* ~ U[−10, 10]^dim shared by all agents ("weak": i.i.d. data) or drawn per agent ("strong").
    ``heterogeneity`` h in [0, 1] (instead of ``non_iid``) gives agent i the truth (1 − h)·x* + h·x_i*
    with x_i* drawn as "strong" draws it, so h = 1 is "strong" exactly and h between 0 and 1 varies
    the δ of FedPD's δ-non-i.i.d. assumption (eq. (6)) continuously.
    Loss log(1 + exp(−b aᵀx)) + Σ_j λα x_j²/(1 + α x_j²).
    """
    n = samples_per_client + test_samples_per_client
    check_eager(clients, n, dim)
    g = torch.Generator().manual_seed(seed)
    shared = torch.rand(dim, generator=g, dtype=torch.float64) * 20 - 10
    xs, ys = [], []
    for _ in range(clients):
        if heterogeneity is not None:
            own = torch.rand(dim, generator=g, dtype=torch.float64) * 20 - 10
            truth = (1 - heterogeneity) * shared + heterogeneity * own
        else:
            truth = shared if non_iid == "weak" else torch.rand(dim, generator=g, dtype=torch.float64) * 20 - 10
        a = torch.cat(
            [torch.randn(n, dim - 1, generator=g, dtype=torch.float64), torch.ones(n, 1, dtype=torch.float64)], 1
        )
        score = a @ truth + label_noise * torch.randn(n, generator=g, dtype=torch.float64)
        xs.append(a)
        ys.append(torch.where(score >= 0, 1.0, -1.0).to(torch.float64))
    train, test = _split(xs, ys, [samples_per_client] * clients)
    module = nn.Linear(dim, 1, bias=False)
    return Problem(
        name="fedpd_logreg",
        train=train,
        test=test,
        model=FlatModel(module),
        loss=losses.logistic_pm1,
        x_init=torch.zeros(dim, dtype=torch.float64),
        classifies=True,
        regularizer=losses.nonconvex_penalty(penalty_lambda, penalty_alpha),
        predict=losses.sign_predict,
        info={"non_iid": non_iid if heterogeneity is None else f"heterogeneity {heterogeneity:g}"},
    )


class SyntheticOptions(Options):
    alpha: float = Field(1.0, ge=0, description="α: how much the local models differ")
    beta: float = Field(1.0, ge=0, description="β: how much the local data differ")
    clients: int = Field(30, ge=1, description='number of clients (parties)')
    dim: int = Field(60, ge=1, description='number of features d')
    classes: int = Field(10, ge=2, description='number of classes')
    test_fraction: float = Field(0.2, ge=0, lt=1, description="share of each client's samples held out for testing")
    iid: bool = Field(False, description='one model and one feature distribution for every client')
    max_client_samples: int = Field(1000, ge=1, description='cap on the power-law client sizes')
    seed: int = Field(0, ge=0, le=SEED_MAX, description="seed of the data (and of the model's initialisation)")

    @model_validator(mode="after")
    def _iid_has_no_spread(self):
        spread = self.given("alpha", "beta") if self.iid else []
        if spread:
            raise refuse(spread[0], "how much the clients differ, and iid = true gives every client one model and one "
                         f"feature distribution, so it would be ignored (allowed: iid = false, or no {spread[0]})")
        return self


@declares("synthetic", SyntheticOptions,
          "FedProx Synthetic(alpha, beta): 60 features, 10 classes, power-law sizes, multinomial logistic")
def fedprox_synthetic(
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    clients: int = 30,
    dim: int = 60,
    classes: int = 10,
    test_fraction: float = 0.2,
    iid: bool = False,
    max_client_samples: int = 1000,
    seed: int = 0,
    lazy: bool | None = None,
) -> Problem:
    """FedProx's Synthetic(α, β) (Li et al., MLSys 2020, §5.1) with a multinomial logistic model.

    Client k: u_k ~ N(0, α), W_k ~ N(u_k, 1)^{C×d}, b_k ~ N(u_k, 1)^C; B_k ~ N(0, β),
    v_k ~ N(B_k, 1)^d; x ~ N(v_k, Σ) with Σ_jj = j^−1.2; y = argmax(W_k x + b_k). Client sizes
    follow a power law (lognormal(4, 2) + 50, as in the FedProx generator), capped at
    ``max_client_samples`` (the generator has no cap; its heavy tail only slows a simulation
    down). ``iid`` draws one
    (W, b) and v ~ N(0, I) for everybody.

    The sizes (and the iid (W, b)) come from the problem's generator; everything of client k from
    client k's own generator (:func:`fedpd.problems.lazy.client_generators`), so the problem builds
    lazily — a client's samples generated when it is first read — whenever the eager build would
    hold more than ``EAGER_LIMIT`` numbers (``lazy``: force either way), with the same data.
    """
    # one line, not an allocation failure, when N or d cannot be built here
    check_memory("problem.clients", 64 * clients, f"{clients} clients' sizes and offsets (64 bytes per client)")
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    # every client's size in one vectorised draw (N = 10⁶: milliseconds)
    sizes = (
        torch.distributions.LogNormal(4.0, 2.0).icdf(torch.rand(clients, generator=g, dtype=f64).clamp(1e-6, 1 - 1e-6))
    ).long() + 50
    sizes = sizes.clamp(max=max_client_samples)
    largest = int(sizes.max())
    check_memory("problem.dim", 8 * ((dim + 1) * classes * 6 + dim * (largest + 2)),
                 f"a model of {(dim + 1) * classes} parameters and a client of {largest} x {dim} features")
    std = torch.arange(1, dim + 1, dtype=f64).pow(-1.2).sqrt()
    W0, b0 = torch.randn(classes, dim, generator=g, dtype=f64), torch.randn(classes, generator=g, dtype=f64)
    n_train = (sizes.double() * (1 - test_fraction)).round().long().clamp(min=1)

    def client(k: int):
        """Client k's samples from its own generator: the same whether generated with
        everybody's or alone, on demand."""
        (gk,) = client_generators(seed, "synthetic", [k])
        if iid:
            W, b, v = W0, b0, torch.zeros(dim, dtype=f64)
        else:
            u = alpha**0.5 * torch.randn((), generator=gk, dtype=f64)
            W = u + torch.randn(classes, dim, generator=gk, dtype=f64)
            b = u + torch.randn(classes, generator=gk, dtype=f64)
            B = beta**0.5 * torch.randn((), generator=gk, dtype=f64)
            v = B + torch.randn(dim, generator=gk, dtype=f64)
        x = v + std * torch.randn(int(sizes[k]), dim, generator=gk, dtype=f64)
        return x, (x @ W.T + b).argmax(1)

    if lazy is None:
        lazy = sizes_numbers(sizes, dim) > on_demand.EAGER_LIMIT
    train, test = ClientSource(client, sizes, n_train).splits(lazy)
    module = nn.Linear(dim, classes)
    return Problem(
        name="synthetic",
        train=train,
        test=test,
        model=FlatModel(module),
        loss=losses.cross_entropy,
        x_init=torch.zeros(FlatModel(module).dim, dtype=f64),
        classifies=True,
        predict=losses.argmax_predict,
        info={"alpha": alpha, "beta": beta},
    )


class LeastSquaresOptions(Options):
    clients: int = Field(10, ge=1, description='number of clients (parties)')
    samples_per_client: int = Field(50, ge=1, description='training samples per client')
    test_samples_per_client: int = Field(10, ge=0, description='test samples per client')
    dim: int = Field(5, ge=1, description='number of features d')
    heterogeneity: float = Field(1.0, ge=0, description="std of each client's true model around the shared one")
    noise: float = Field(0.1, ge=0, description='std of the label noise')
    ridge: float = Field(0.0, ge=0, description='ridge penalty ridge/2 ‖x‖²')
    seed: int = Field(0, ge=0, le=SEED_MAX, description="seed of the data (and of the model's initialisation)")


@declares("least_squares", LeastSquaresOptions, "heterogeneous least squares (quadratic: has the exact local solver)")
def least_squares(
    *,
    clients: int = 10,
    samples_per_client: int = 50,
    test_samples_per_client: int = 10,
    dim: int = 5,
    heterogeneity: float = 1.0,
    noise: float = 0.1,
    ridge: float = 0.0,
    seed: int = 0,
) -> Problem:
    """f_i(x) = 1/(2 n_i) ‖A_i x − b_i‖² + ridge/2 ‖x‖², b_i = A_i x_i* + noise,
    x_i* = x* + heterogeneity · N(0, I). Quadratic, so it has an exact local solver."""
    n = samples_per_client + test_samples_per_client
    check_eager(clients, n, dim)
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    shared = torch.randn(dim, generator=g, dtype=f64)
    xs, ys = [], []
    for _ in range(clients):
        truth = shared + heterogeneity * torch.randn(dim, generator=g, dtype=f64)
        a = torch.randn(n, dim, generator=g, dtype=f64)
        xs.append(a)
        ys.append(a @ truth + noise * torch.randn(n, generator=g, dtype=f64))
    train, test = _split(xs, ys, [samples_per_client] * clients)

    def quadratic(split: ClientSplit, ids: torch.Tensor):
        X, Y, Wt = split.padded(ids)  # [K, m, d], [K, m], [K, m]
        count = Wt.sum(1)[:, None, None]
        H = torch.einsum("kmd,km,kme->kde", X, Wt.to(X.dtype), X) / count
        gvec = torch.einsum("kmd,km->kd", X, (Wt * Y).to(X.dtype)) / count[..., 0]
        if ridge:
            H = H + ridge * torch.eye(dim, dtype=X.dtype)
        return H, gvec

    return Problem(
        name="least_squares",
        train=train,
        test=test,
        model=FlatModel(nn.Linear(dim, 1, bias=False)),
        loss=losses.half_squared,
        x_init=torch.zeros(dim, dtype=f64),
        regularizer=(lambda x: 0.5 * ridge * (x * x).sum()) if ridge else None,
        quadratic=quadratic,
    )
