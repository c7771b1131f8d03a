"""Every named thing a config can pick — problems, algorithms, solvers, samplers — with its
options model and a one-line description (what ``fedpd list`` shows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from pydantic import Field

from fedpd.algorithms.fedavg import FedAvg, FedProx
from fedpd.algorithms.primal_dual import AFedPD, FedADMM, FedDyn, FedPD, PrimalDual
from fedpd.algorithms.fedcm import FedCM
from fedpd.algorithms.fedpd_vr import FedPDVR
from fedpd.algorithms.sam import AFedPDSAM, FedSAM, FedSpeed
from fedpd.algorithms.scaffold import Scaffold
from fedpd.algorithms.xu import ParallelADMM, ParallelSAGA, StochasticADMM, StochasticSAGA
from fedpd.config import ExactOptions, GDOptions, Options, SamplerAll, SamplerBernoulli, SamplerUniform, SGDOptions
from fedpd.problems import synthetic
from fedpd.problems.dataset import dataset_problem
from fedpd import registry_fedplus as _fedplus
from fedpd.sampling import Bernoulli, Everyone, UniformK
from fedpd.solvers import ExactSolver, GradientSolver


@dataclass(frozen=True)
class Entry:
    build: Callable
    options: type[Options]
    description: str


# --- problems ------------------------------------------------------------------------------
class FedPDLogregOptions(Options):
    clients: int = Field(100, ge=1)
    samples_per_client: int = Field(400, ge=1)
    test_samples_per_client: int = Field(100, ge=0)
    dim: int = Field(20, ge=2)
    non_iid: Literal["weak", "strong"] = "strong"
    penalty_lambda: float = Field(0.1, ge=0)
    penalty_alpha: float = Field(1.0, gt=0)
    label_noise: float = Field(1.0, ge=0)
    seed: int = Field(0, ge=0)


class SyntheticOptions(Options):
    alpha: float = Field(1.0, ge=0)
    beta: float = Field(1.0, ge=0)
    clients: int = Field(30, ge=1)
    dim: int = Field(60, ge=1)
    classes: int = Field(10, ge=2)
    test_fraction: float = Field(0.2, ge=0, lt=1)
    iid: bool = False
    max_client_samples: int = Field(1000, ge=1)
    seed: int = Field(0, ge=0)


class LeastSquaresOptions(Options):
    clients: int = Field(10, ge=1)
    samples_per_client: int = Field(50, ge=1)
    test_samples_per_client: int = Field(10, ge=0)
    dim: int = Field(5, ge=1)
    heterogeneity: float = Field(1.0, ge=0)
    noise: float = Field(0.1, ge=0)
    ridge: float = Field(0.0, ge=0)
    seed: int = Field(0, ge=0)


class DatasetOptions(Options):
    dataset: str = Field(description="dataset name (fedpd data list)")
    data_dir: str | None = Field(None, description="default: $FEDPD_DATA, else ~/.cache/fedpd/data")
    clients: int = Field(100, ge=1, description="ignored by the natural partition (one client per user)")
    partition: Literal["iid", "dirichlet", "shards", "power_law", "natural"] = "iid"
    alpha: float = Field(0.5, gt=0, description="Dirichlet concentration")
    classes_per_client: int = Field(2, ge=1, description="shards: labels per client")
    min_size: int = Field(1, ge=0, description="dirichlet / power_law: fewest samples per client")
    exponent: float = Field(1.5, gt=0, description="power_law exponent")
    test: Literal["pooled", "per_client"] = "pooled"
    test_fraction: float = Field(0.2, ge=0, lt=1, description="per_client: share of each client's samples")
    max_samples: int | None = Field(None, ge=1, description="random training subsample (quick runs)")
    max_test_samples: int | None = Field(None, ge=1, description="random test subsample")
    normalize: bool = Field(True, description="standardise image channels with training statistics")
    augment: bool = Field(False, description="random crop + flip on SGD minibatches (images)")
    seed: int = Field(0, ge=0, description="partition, subsample and model initialisation")
    verify: bool = Field(True, description="check canonical file sizes and SHA-256 (mnist, fashion-mnist, cifar)")
    path: str | None = Field(None, description="image-folder: folder or .tar.gz (absolute or under data_dir)")
    vocab_size: int | None = Field(None, ge=3, description="sent140: words kept incl. <pad>, <unk> (default 10000)")
    seq_len: int | None = Field(None, ge=1, description="sent140: tokens per tweet, front-padded (default 25)")
    label_mode: Literal["fine", "coarse"] | None = Field(None, description="cifar100: 100 fine or 20 coarse labels")
    glove_path: str | None = Field(None, description="sent140: GloVe text file for the word embedding")


PROBLEMS = {
    "dataset": Entry(dataset_problem, DatasetOptions,
                     "a real dataset (fedpd data list) partitioned over clients; model from [model]"),
    "fedpd_logreg": Entry(synthetic.fedpd_logreg, FedPDLogregOptions,
                          "FedPD §5: non-convex penalised logistic regression, 100 agents x 400 samples, d = 20"),
    "synthetic": Entry(synthetic.fedprox_synthetic, SyntheticOptions,
                       "FedProx Synthetic(alpha, beta): 60 features, 10 classes, power-law sizes, multinomial logistic"),
    "least_squares": Entry(synthetic.least_squares, LeastSquaresOptions,
                           "heterogeneous least squares (quadratic: has the exact local solver)"),
}


# --- algorithms ----------------------------------------------------------------------------
class NoOptions(Options):
    pass


class FedProxOptions(_fedplus.AggregatorOptions):
    mu: float = Field(0.1, ge=0)


class ScaffoldOptions(Options):
    server_lr: float = Field(1.0, gt=0)


class FedPDOptions(Options):
    eta: float = Field(1.0, gt=0)
    p: float = Field(0.0, ge=0, lt=1)
    skip: Literal["random", "periodic"] = "random"


class PenaltyOptions(Options):
    eta: float = Field(10.0, gt=0)


class DualMeanOptions(PenaltyOptions):
    output: Literal["server", "average"] = Field("server", description="metrics at x0 or at the participants' mean x̄")


class PrimalDualOptions(Options):
    eta: float = Field(1.0, gt=0)
    participation: Literal["all", "sampled"] = "sampled"
    dual_mean: Literal["participants", "all"] = "all"
    virtual_dual: bool = False
    start: Literal["warm", "server"] = "server"
    p: float = Field(0.0, ge=0, lt=1)
    skip: Literal["random", "periodic"] = "random"
    output: Literal["server", "average"] = "server"


class FedSAMOptions(_fedplus.AggregatorOptions):
    sam_radius: float = Field(0.05, ge=0, description="SAM radius r (replaces solver.sam_radius)")


class PenaltySAMOptions(PenaltyOptions):
    sam_radius: float = Field(0.1, ge=0, description="SAM radius r (replaces solver.sam_radius)")


class FedCMOptions(Options):
    alpha: float = Field(0.1, gt=0, le=1, description="weight of the local gradient in the direction")
    server_lr: float = Field(1.0, gt=0)


class FedPDVROptions(FedPDOptions):
    refresh_every: int = Field(20, ge=1, description="I: full local gradient every I rounds")


class StepOptions(Options):
    eta: float = Field(0.01, gt=0, description="step size")


class SAGAOptions(StepOptions):
    init: Literal["gradients", "zero"] = Field("gradients", description="y_j at the start: ∇f_j(w⁰) (round 0 "
                                               "takes every client, as the text) or 0")


class StochasticSAGAOptions(SAGAOptions):
    batch_size: int = Field(1, ge=1)


class ADMMOptions(Options):
    eta: float = Field(0.1, gt=0, description="step size")


class StochasticADMMOptions(ADMMOptions):
    batch_size: int = Field(1, ge=1)


def _algo(cls, options):
    return Entry(cls, options, cls.description)


ALGORITHMS = {
    "fedavg": _algo(FedAvg, _fedplus.FedAvgOptions),
    "fedprox": _algo(FedProx, FedProxOptions),
    "scaffold": _algo(Scaffold, ScaffoldOptions),
    "fedpd": _algo(FedPD, FedPDOptions),
    "feddyn": _algo(FedDyn, DualMeanOptions),
    "fedadmm": _algo(FedADMM, PenaltyOptions),
    "afedpd": _algo(AFedPD, DualMeanOptions),
    "primal_dual": _algo(PrimalDual, PrimalDualOptions),
    "fedsam": _algo(FedSAM, FedSAMOptions),
    "afedpdsam": _algo(AFedPDSAM, PenaltySAMOptions),
    "fedspeed": _algo(FedSpeed, PenaltySAMOptions),
    "fedcm": _algo(FedCM, FedCMOptions),
    "fedpd_vr": _algo(FedPDVR, FedPDVROptions),
    "parallel_saga": _algo(ParallelSAGA, SAGAOptions),
    "stochastic_saga": _algo(StochasticSAGA, StochasticSAGAOptions),
    "parallel_admm": _algo(ParallelADMM, ADMMOptions),
    "stochastic_admm": _algo(StochasticADMM, StochasticADMMOptions),
}


# --- solvers -------------------------------------------------------------------------------
SOLVERS = {
    "gd": Entry(GradientSolver, GDOptions, "full-batch gradient descent, local_steps steps per round"),
    "sgd": Entry(GradientSolver, SGDOptions, "minibatch SGD (momentum, weight decay, per-round lr decay, SAM)"),
    "exact": Entry(lambda: ExactSolver(), ExactOptions, "exact minimiser of the local objective (quadratic problems)"),
}

# --- samplers ------------------------------------------------------------------------------
SAMPLERS = {
    "all": Entry(Everyone, SamplerAll, Everyone.description),
    "uniform": Entry(UniformK, SamplerUniform, UniformK.description),
    "bernoulli": Entry(Bernoulli, SamplerBernoulli, Bernoulli.description),
}

# Fed+, personalised baselines, Fed+'s problems, faults and attacks (fedpd.registry_fedplus)
PROBLEMS.update({k: Entry(*v) for k, v in _fedplus.PROBLEMS.items()})
ALGORITHMS.update({k: Entry(*v) for k, v in _fedplus.ALGORITHMS.items()})
ATTACKS = {k: Entry(*v) for k, v in _fedplus.ATTACKS.items()}

TABLES = {"problem": PROBLEMS, "algorithm": ALGORITHMS, "solver": SOLVERS, "sampler": SAMPLERS, "attack": ATTACKS}
DEFAULT_NAMES = {"solver": "gd", "sampler": "all", "attack": "none"}
