"""Registry entries for robust and personalised FL (Fed+ and its Table 1 presets, the personalised
baselines, robust server aggregation, Fed+'s problems, faults and attacks): their option models
and ``(build, options, description)`` triples, which :mod:`fedpd.registry` turns into entries.
Kept apart so that the registry itself stays a short table."""

from __future__ import annotations

import functools
from typing import Any, Literal, Optional

from pydantic import Field

from fedpd.algorithms import fedplus, personalized
from fedpd.attacks import Attack
from fedpd.config import Options
from fedpd.problems import fedplus as problems

AggregatorName = Literal["mean", "geometric_median", "coordinate_median", "trimmed_mean", "krum"]
ProxKind = Literal["zero", "sq_l2", "l2", "l1", "indicator"]


# --- robust server aggregation (algorithms whose server averages models) -----------------------
class AggregatorOptions(Options):
    aggregator: AggregatorName = Field("mean", description="server aggregation (fedpd.aggregators)")
    aggregator_options: dict[str, Any] = Field(default_factory=dict, description="options of the aggregator")
    weights: Literal["uniform", "samples"] = "uniform"


class FedAvgOptions(AggregatorOptions):
    pass


# --- Fed+ ------------------------------------------------------------------------------------
class FedPlusGroup(Options):
    pattern: str = Field(description="fnmatch pattern on parameter names, e.g. 'linear.*'")
    psi: ProxKind = "l2"
    delta: float = Field(0.1, ge=0)


class _FedPlusCommon(Options):
    aggregate_over: Literal["all", "participants"] = "all"
    weights: Literal["uniform", "samples"] = "uniform"
    party_steps: list[int] = Field(default_factory=list, description="E_k per party (length N); []: solver.local_steps")
    local_step: Literal["implicit", "explicit"] = "implicit"


class _Eq25Options(Options):
    tol: float = Field(1e-7, gt=0, description="eq. (25): stop when the aggregate moves less")
    max_iter: int = Field(1000, ge=1, description="eq. (25): iteration cap")
    init: Literal["mean", "median", "previous"] = "mean"


class FedPlusVariantOptions(_FedPlusCommon, _Eq25Options):
    sigma: float = Field(1.0, gt=0)
    delta: float = Field(0.1, ge=0)
    lam: float = Field(0.0, ge=0, le=1)


class FedPlusOptions(FedPlusVariantOptions):
    psi: ProxKind = "l2"
    sigma: float = Field(1.0, ge=0)
    groups: list[FedPlusGroup] = Field(default_factory=list, description="hybrid: per-parameter-group psi and delta")
    aggregator: Literal["fedplus", "mean", "geometric_median", "coordinate_median", "trimmed_mean", "krum"] = "fedplus"
    aggregator_options: dict[str, Any] = Field(default_factory=dict)


class FedPlusLocalOptions(Options):
    party_steps: list[int] = Field(default_factory=list)


class FedPlusServerOptions(Options):
    aggregate_over: Literal["all", "participants"] = "participants"
    weights: Literal["uniform", "samples"] = "uniform"
    party_steps: list[int] = Field(default_factory=list)
    aggregator_options: dict[str, Any] = Field(default_factory=dict)


class FedPlusFedProxOptions(Options):
    sigma: float = Field(0.1, gt=0, description="FedProx's mu")
    aggregate_over: Literal["all", "participants"] = "participants"
    weights: Literal["uniform", "samples"] = "uniform"
    party_steps: list[int] = Field(default_factory=list)
    local_step: Literal["implicit", "explicit"] = "implicit"


# --- personalised baselines ------------------------------------------------------------------
class DittoOptions(AggregatorOptions):
    lam: float = Field(0.1, ge=0, description="lambda of h_k(v; w) = F_k(v) + lambda/2 ||v - w||^2")


class APFLOptions(AggregatorOptions):
    alpha: float = Field(0.25, ge=0, le=1, description="initial mixing weight")
    adaptive: bool = True
    alpha_lr: float = Field(0.0, ge=0, description="step for alpha; 0: the solver's lr")


class PFedMeOptions(AggregatorOptions):
    lam: float = Field(15.0, gt=0)
    inner_steps: int = Field(5, ge=1, description="K: GD steps on the inner (Moreau) problem")
    personal_lr: float = Field(0.01, gt=0)
    beta: float = Field(1.0, gt=0, description="server mixing: w = (1 - beta) w + beta mean")


class PerFedAvgOptions(AggregatorOptions):
    alpha: float = Field(0.01, gt=0, description="inner (adaptation) step size")


class NoOptions(Options):
    pass


def _algo(cls, options):
    return (cls, options, cls.description)


ALGORITHMS = {
    "fedplus": _algo(fedplus.FedPlus, FedPlusOptions),
    "fedavg_plus": _algo(fedplus.FedAvgPlus, FedPlusVariantOptions),
    "fedgeomed_plus": _algo(fedplus.FedGeoMedPlus, FedPlusVariantOptions),
    "fedcomed_plus": _algo(fedplus.FedCoMedPlus, FedPlusVariantOptions),
    "fedplus_local": _algo(fedplus.FedPlusLocal, FedPlusLocalOptions),
    "fedplus_fedavg": _algo(fedplus.FedPlusFedAvg, FedPlusServerOptions),
    "fedplus_rfa": _algo(fedplus.FedPlusRFA, FedPlusServerOptions),
    "fedplus_comed": _algo(fedplus.FedPlusCoMed, FedPlusServerOptions),
    "fedplus_fedprox": _algo(fedplus.FedPlusFedProx, FedPlusFedProxOptions),
    "local": _algo(personalized.LocalOnly, NoOptions),
    "ditto": _algo(personalized.Ditto, DittoOptions),
    "apfl": _algo(personalized.APFL, APFLOptions),
    "pfedme": _algo(personalized.PFedMe, PFedMeOptions),
    "perfedavg": _algo(personalized.PerFedAvg, PerFedAvgOptions),
}


# --- problems --------------------------------------------------------------------------------
class FedPlusRegressionOptions(Options):
    clients: int = Field(10, ge=1)
    dim: int = Field(1000, ge=1)
    samples_per_client: int = Field(100, ge=2)
    test_fraction: float = Field(0.5, ge=0, lt=1)
    outliers: int = Field(1, ge=0)
    noise_var: float = Field(2.0, ge=0)
    mean_var: float = Field(0.5, ge=0)
    center_var: float = Field(5.0, ge=0)
    outlier_center_var: float = Field(50.0, ge=0)
    laplace_scale: float = Field(0.5, ge=0)
    seed: int = Field(0, ge=0)


class FedPlusMNISTOptions(Options):
    dataset: str = "mnist"
    variant: Literal["robust", "personal"] = "robust"
    clients: int = Field(10, ge=1)
    negate_fraction: Optional[float] = Field(None, ge=0, le=1, description="default: 0.1 (N <= 10) or 0.2")
    classes_per_party: int = Field(2, ge=0)
    noise_scale: float = Field(0.5, ge=0)
    test_fraction: float = Field(0.5, ge=0, lt=1)
    max_samples: int = Field(0, ge=0, description="0: all samples")
    data_dir: str = ""
    seed: int = Field(0, ge=0)


PROBLEMS = {
    "fedplus_regression": (problems.fedplus_regression, FedPlusRegressionOptions,
                           "Fed+ §5.1 synthetic regression: N = 10, d = 1000, last party an outlier (quadratic)"),
    "fedplus_mnist": (problems.fedplus_mnist, FedPlusMNISTOptions,
                      "Fed+ §5.1 MNIST-robust / MNIST-personal (negated parties, noisy classes), logistic regression"),
}


# --- faults and attacks ----------------------------------------------------------------------
class NoAttackOptions(Options):
    pass


class _Targets(Options):
    fraction: float = Field(0.1, ge=0, le=1, description="share of the parties (x N rounded half up, >= 1)")
    parties: list[int] = Field(default_factory=list, description="explicit party ids (override fraction)")
    seed: int = Field(0, ge=0, description="which parties (the attack's own seed)")


class DataAttackOptions(_Targets):
    splits: Literal["train", "both"] = "train"


class UpdateAttackOptions(_Targets):
    probability: float = Field(1.0, gt=0, le=1, description="chance a chosen party misbehaves in a round")
    start_round: int = Field(0, ge=0)


class SignFlipOptions(UpdateAttackOptions):
    factor: float = Field(1.0, gt=0)


class ScaleOptions(UpdateAttackOptions):
    factor: float = Field(10.0)


class GaussianOptions(UpdateAttackOptions):
    std: float = Field(1.0, gt=0)


def _attack(kind: str, options, description: str):
    return (functools.partial(Attack, kind), options, description)


ATTACKS = {
    "none": _attack("none", NoAttackOptions, "no faults"),
    "negate_inputs": _attack("negate_inputs", DataAttackOptions, "outliers by data: the chosen parties' inputs negated"),
    "label_flip": _attack("label_flip", DataAttackOptions, "outliers by data: labels flipped (c -> C-1-c, y -> -y)"),
    "sign_flip": _attack("sign_flip", SignFlipOptions, "uploads: update sign flipped (times factor)"),
    "scale": _attack("scale", ScaleOptions, "uploads: update scaled by factor"),
    "gaussian": _attack("gaussian", GaussianOptions, "uploads: Gaussian noise of std added"),
    "nan": _attack("nan", UpdateAttackOptions, "uploads: all NaN (rejected and counted)"),
    "inf": _attack("inf", UpdateAttackOptions, "uploads: all +Inf (rejected and counted)"),
}
