"""Fed+'s §5.1 problems (Kundu, Yu, Wynter, Lim, "Robustness and personalization in federated
learning: a unified approach via regularization", 2022): the personalised synthetic regression with an outlier party,
and the MNIST-robust / MNIST-personal constructions as transforms of any image dataset.

Synthetic regression (N = 10, d = 1000): party k draws x ~ N(μ_k, Σ) with μ_k ~ N(0, 0.5 I) and
Σ_jj = ((j − 1) mod 50 + 1)^(−1.1) (the paper's mod(j, 50)^(−1.1) is infinite at multiples of
50), y = w_kᵀx + v, v ~ N(0, 2); w_k = w̄ + Laplace(0.5) noise with w̄ ~ N(0, 5 I) shared, and
the last party (the outlier) uses its own w̄ ~ N(0, 50 I). 100 samples per party, half for
training, half for testing. Variances, not standard deviations, as in N(0, 5 I).

Images (MNIST-robust / MNIST-personal): split the dataset equally and at random into N parties,
negate the images (x ← −x) of the last 10 % of the parties (20 % for N = 50), and for
"personal" also add Laplacian noise to the images of 2 classes chosen per party; each party's
data is split 50/50 into train and test. Model: multinomial logistic regression.
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from fedpd.errors import ConfigError
from fedpd.flat import FlatModel
from fedpd.models import LogisticRegression
from fedpd.options import Options, SEED_MAX, declares, refuse
from fedpd.problems import losses
from fedpd.problems.base import ClientSplit, Problem
from fedpd.problems.lazy import check_eager
from fedpd.problems.poisoning import party_count


def _laplace(shape, scale: float, g: torch.Generator, dtype=torch.float64) -> Tensor:
    """Laplace(0, scale) draws by inverting the CDF. ``torch.rand`` may return exactly 0 (in float32
    once in 2^24 draws: MNIST-personal's noise draws millions), where the inverse is −inf; that draw
    is moved to the next representable u, every other draw unchanged."""
    u = torch.rand(shape, generator=g, dtype=dtype) - 0.5
    u = torch.maximum(u, torch.nextafter(torch.tensor(-0.5, dtype=dtype), torch.tensor(0.0, dtype=dtype)))
    return -scale * torch.sign(u) * torch.log1p(-2 * u.abs())


def _split_parts(xs: list[Tensor], ys: list[Tensor], test_fraction: float) -> tuple[ClientSplit, ClientSplit]:
    n_train = [len(y) - int(round(len(y) * test_fraction)) for y in ys]
    train = ClientSplit.from_parts([x[:n] for x, n in zip(xs, n_train)], [y[:n] for y, n in zip(ys, n_train)])
    test = ClientSplit.from_parts([x[n:] for x, n in zip(xs, n_train)], [y[n:] for y, n in zip(ys, n_train)])
    return train, test


def _quadratic(split: ClientSplit, ids: Tensor) -> tuple[Tensor, Tensor]:
    """f_i = 1/(2 n_i)‖A_i x − b_i‖²: H_i = A_iᵀA_i/n_i, g_i = A_iᵀb_i/n_i (for the exact solver)."""
    X, Y, W = split.padded(ids)
    count = W.sum(1)[:, None, None]
    H = torch.einsum("kmd,km,kme->kde", X, W.to(X.dtype), X) / count
    g = torch.einsum("kmd,km->kd", X, (W * Y).to(X.dtype)) / count[..., 0]
    return H, g


class FedPlusRegressionOptions(Options):
    clients: int = Field(10, ge=1, description='number of clients (parties)')
    dim: int = Field(1000, ge=1, description='number of features d')
    samples_per_client: int = Field(100, ge=2, description='training samples per client')
    test_fraction: float = Field(0.5, ge=0, lt=1, description="share of each client's samples held out for testing")
    outliers: int = Field(1, ge=0, description='the last this many parties are outliers')
    noise_var: float = Field(2.0, ge=0, description='variance of the label noise')
    mean_var: float = Field(0.5, ge=0, description="variance of each party's feature mean μ_k")
    center_var: float = Field(5.0, ge=0, description="variance of the shared centre w̄ of the parties' models")
    outlier_center_var: float = Field(50.0, ge=0, description="variance of the outliers' own centre")
    laplace_scale: float = Field(0.5, ge=0, description='scale of the Laplace noise of w_k around its centre')
    seed: int = Field(0, ge=0, le=SEED_MAX, description="seed of the data (and of the model's initialisation)")


@declares("fedplus_regression", FedPlusRegressionOptions,
          "Fed+ §5.1 synthetic regression: N = 10, d = 1000, last party an outlier (quadratic)")
def fedplus_regression(*, clients: int = 10, dim: int = 1000, samples_per_client: int = 100,
                       test_fraction: float = 0.5, outliers: int = 1, noise_var: float = 2.0, mean_var: float = 0.5,
                       center_var: float = 5.0, outlier_center_var: float = 50.0, laplace_scale: float = 0.5,
                       seed: int = 0) -> Problem:
    """Fed+ §5.1's personalised synthetic regression (module docstring); the last ``outliers``
    parties are the outliers. Loss ½(aᵀx − b)², linear model without bias: quadratic, so the
    exact local solver applies. ``info["truth"]`` holds the parties' w_k."""
    if outliers > clients:
        raise ConfigError(f"problem.outliers: at most problem.clients = {clients} (got {outliers})")
    check_eager(clients, samples_per_client, dim)
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    j = torch.arange(dim, dtype=f64)
    std = ((j % 50) + 1).pow(-1.1).sqrt()  # Σ_jj = ((j − 1) mod 50 + 1)^(−1.1) for 1-based j
    w_bar = math.sqrt(center_var) * torch.randn(dim, generator=g, dtype=f64)
    w_out = math.sqrt(outlier_center_var) * torch.randn(dim, generator=g, dtype=f64)
    xs, ys, truth = [], [], []
    for k in range(clients):
        center = w_out if k >= clients - outliers else w_bar
        w_k = center + _laplace(dim, laplace_scale, g)
        mu_k = math.sqrt(mean_var) * torch.randn(dim, generator=g, dtype=f64)
        x = mu_k + std * torch.randn(samples_per_client, dim, generator=g, dtype=f64)
        y = x @ w_k + math.sqrt(noise_var) * torch.randn(samples_per_client, generator=g, dtype=f64)
        xs.append(x)
        ys.append(y)
        truth.append(w_k)
    train, test = _split_parts(xs, ys, test_fraction)
    return Problem(
        name="fedplus_regression",
        train=train,
        test=test,
        model=FlatModel(nn.Linear(dim, 1, bias=False)),
        loss=losses.half_squared,
        x_init=torch.zeros(dim, dtype=f64),
        quadratic=_quadratic,
        info={"truth": torch.stack(truth), "outliers": list(range(clients - outliers, clients))},
    )


# --- image transforms (MNIST-robust / MNIST-personal) ------------------------------------------
def split_equally(n: int, clients: int, generator: torch.Generator) -> list[Tensor]:
    """A random partition of range(n) into ``clients`` parts of equal size (the first n mod N
    parts get one more)."""
    if clients < 1 or clients > n:
        raise ConfigError(f"problem.clients: must lie in 1..{n} for {n} samples (got {clients})")
    return list(torch.randperm(n, generator=generator).tensor_split(clients))


def outlier_parties(clients: int, fraction: float) -> list[int]:
    """The last :func:`fedpd.problems.poisoning.party_count` (fraction, N) parties: fraction · N rounded half
    up, at least one when fraction > 0 (the attacks' rule)."""
    m = party_count(fraction, clients)
    return list(range(clients - m, clients))


def negate_images(x: Tensor, parts: list[Tensor], parties: list[int]) -> Tensor:
    """A copy of ``x`` with the samples of ``parties`` negated (x ← −x): Fed+'s robust variant."""
    out = x.clone()
    for k in parties:
        out[parts[k]] = -out[parts[k]]
    return out


def laplace_noise_classes(x: Tensor, y: Tensor, parts: list[Tensor], classes_per_party: int, scale: float,
                          generator: torch.Generator, num_classes: int | None = None) -> tuple[Tensor, Tensor]:
    """A copy of ``x`` where each party's images of ``classes_per_party`` classes (chosen per
    party at random) carry Laplace(0, scale) noise: Fed+'s personal variant. Returns (x, the
    chosen classes [N, classes_per_party])."""
    c = num_classes if num_classes is not None else int(y.max()) + 1
    if not 0 <= classes_per_party <= c:
        raise ConfigError(f"problem.classes_per_party: must lie in 0..{c} (got {classes_per_party})")
    out = x.clone()
    chosen = torch.stack([torch.randperm(c, generator=generator)[:classes_per_party] for _ in parts]) \
        if parts else torch.zeros(0, classes_per_party, dtype=torch.int64)
    for k, part in enumerate(parts):
        idx = part[torch.isin(y[part], chosen[k])]
        if idx.numel():
            out[idx] = out[idx] + _laplace(out[idx].shape, scale, generator, out.dtype)
    return out, chosen


def fedplus_image_problem(x: Tensor, y: Tensor, *, variant: str = "robust", clients: int = 10,
                          negate_fraction: float | None = None, classes_per_party: int = 2, noise_scale: float = 0.5,
                          test_fraction: float = 0.5, num_classes: int | None = None, seed: int = 0,
                          name: str = "fedplus_images") -> Problem:
    """Fed+ §5.1's MNIST-robust (``variant="robust"``) or MNIST-personal (``"personal"``) built
    from any labelled images ``x`` [n, ...] (floats) and ``y`` [n] (class ids), with a
    multinomial logistic-regression model. ``negate_fraction`` defaults to the paper's 10 %
    (N <= 10) or 20 % (larger N). ``noise_scale`` (the paper gives none) is the Laplace scale on
    [0, 1] images."""
    if variant not in ("robust", "personal"):
        raise ConfigError(f"problem.variant: {variant!r} (allowed: robust, personal)")
    if not x.is_floating_point():
        raise ConfigError("problem: images must be floating-point tensors")
    if negate_fraction is None:
        negate_fraction = 0.1 if clients <= 10 else 0.2
    g = torch.Generator().manual_seed(seed)
    c = num_classes if num_classes is not None else int(y.max()) + 1
    parts = split_equally(len(y), clients, g)
    negated = outlier_parties(clients, negate_fraction)
    x = negate_images(x, parts, negated)
    chosen = None
    if variant == "personal":
        x, chosen = laplace_noise_classes(x, y, parts, classes_per_party, noise_scale, g, c)
    train, test = _split_parts([x[p] for p in parts], [y[p] for p in parts], test_fraction)
    features = math.prod(x.shape[1:])
    module = LogisticRegression(features, c)
    flat = FlatModel(module)
    return Problem(
        name=name,
        train=train,
        test=test,
        model=flat,
        loss=losses.cross_entropy,
        x_init=torch.zeros(flat.dim, dtype=x.dtype),
        classifies=True,
        predict=losses.argmax_predict,
        info={"num_classes": c, "negated_parties": negated, "variant": variant,
              "noisy_classes": chosen.tolist() if chosen is not None else None},
    )


class FedPlusMNISTOptions(Options):
    dataset: str = Field("mnist", description='image dataset to build it from (fedpd data list)')
    variant: Literal["robust", "personal"] = Field(
        "robust", description="robust: negated parties; personal: also noisy classes per party"
    )
    clients: int = Field(10, ge=1, description='number of clients (parties)')
    negate_fraction: Optional[float] = Field(None, ge=0, le=1, description="default: 0.1 (N <= 10) or 0.2")
    classes_per_party: int = Field(2, ge=0, description='personal: classes given Laplace noise per party')
    noise_scale: float = Field(0.5, ge=0, description='personal: Laplace scale on [0, 1] images')
    test_fraction: float = Field(0.5, ge=0, lt=1, description="share of each client's samples held out for testing")
    max_samples: int = Field(0, ge=0, description="0: all samples")
    data_dir: str = Field("", description="default: $FEDPD_DATA")
    seed: int = Field(0, ge=0, le=SEED_MAX, description="seed of the data (and of the model's initialisation)")

    @model_validator(mode="after")
    def _personal_options(self):
        unused = self.given("classes_per_party", "noise_scale") if self.variant == "robust" else []
        if unused:
            raise refuse(unused[0], "the personal variant's noisy classes, and variant = \"robust\" adds none, so it "
                         f"would be ignored (allowed: variant = \"personal\", or no {unused[0]})")
        return self


@declares("fedplus_mnist", FedPlusMNISTOptions,
          "Fed+ §5.1 MNIST-robust / MNIST-personal (negated parties, noisy classes), logistic regression")
def fedplus_mnist(*, dataset: str = "mnist", variant: str = "robust", clients: int = 10,
                  negate_fraction: float | None = None, classes_per_party: int = 2, noise_scale: float = 0.5,
                  test_fraction: float = 0.5, max_samples: int = 0, data_dir: str = "", seed: int = 0) -> Problem:
    """MNIST-robust / MNIST-personal on a real image dataset (``fedpd data`` loaders): the train
    and test files pooled (the paper splits all of MNIST among the parties), optionally the
    first ``max_samples`` of a seeded shuffle, then :func:`fedplus_image_problem`."""
    from fedpd.data.download import load_or_say_how

    ds = load_or_say_how(dataset, data_dir or None)  # missing files: one line ending with the command that fetches them
    x = torch.cat([ds.x_train, ds.x_test]).float()
    y = torch.cat([ds.y_train, ds.y_test])
    if max_samples and max_samples < len(y):
        keep = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed + 1))[:max_samples]
        x, y = x[keep], y[keep]
    return fedplus_image_problem(x, y, variant=variant, clients=clients, negate_fraction=negate_fraction,
                                 classes_per_party=classes_per_party, noise_scale=noise_scale,
                                 test_fraction=test_fraction, num_classes=ds.num_classes, seed=seed,
                                 name=f"{dataset}_{variant}")
