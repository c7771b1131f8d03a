"""Pre-aggregation: steps that map the round's K rows to new rows before a robust rule reads them.

A defence is a chain, ``pre = ["arc", "nnm"]`` before ``aggregator = "trimmed_mean"``
(:class:`fedpd.defence.Defence`): each step is a small object — a :class:`Step`, constructed with
its own options (``Options``, a pydantic model: its own f where it has one), that maps the rows
(and, for bucketing, the round's server stream) to new rows and declares how many rows it needs to
leave the next stage enough (:meth:`Step.rows_needed`). The steps run in the order given and the
rule aggregates what the last one returns. In a config the chain is
``algorithm.aggregator_options.pre`` (a name or a list of names) beside the rule's own options; a
step reads the keys its ``Options`` declares (``bucket_size`` is bucketing's s, ``n_byzantine``
the f of NNM and ARC — and of Krum and Bulyan, so one f serves the whole chain):
:func:`fedpd.aggregators.pipeline` hands each step and the rule what they declare. The built-in
steps:

* ``nnm`` — nearest-neighbour mixing (Allouah, Farhadkhani, Guerraoui, Gupta, Pinot, Stephan,
  "Fixing by mixing: a recipe for optimal Byzantine ML under heterogeneity", AISTATS 2023, Alg. 1);
* ``bucketing`` — (Karimireddy, He, Jaggi, "Byzantine-robust learning on heterogeneous datasets
  via bucketing", ICLR 2022, Alg. 1);
* ``arc`` — adaptive robust clipping (Allouah, Guerraoui, Gupta, Jellouli, Rizk, Stephan,
  "Adaptive gradient clipping for robust federated learning", ICLR 2025; arXiv:2405.14432).

A plug-in step is a :class:`Step` subclass named by an import path (``pre =
"package.module:MyStep"``) or by an entry point ``pre_aggregation.<name>`` of the group
``fedpd.plugins`` (:mod:`fedpd.names`), exactly like an attack.

The rows are models or updates; NNM and bucketing average rows, so they give the same updates
either way, while ARC clips norms and so works on the updates ``w − reference`` (the reference is
the server model the round started from, 0 without one). Pre-aggregation mixes clients, so a
per-client weight means nothing after it: ``weights = "samples"`` is refused with a ``pre``.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from pydantic import Field, create_model, model_validator
from pydantic.fields import FieldInfo
from torch import Tensor

from fedpd import names
from fedpd.errors import ConfigError
from fedpd.options import NoOptions, Options, refuse
from fedpd.ordered import ordered_norm

__all__ = ["Step", "NNM", "Bucketing", "ARC", "nnm", "bucketing", "arc", "STEPS", "KIND", "DESCRIPTIONS",
           "PreOptions", "step_class", "reads"]


def _check(w: Tensor) -> Tensor:
    if not isinstance(w, Tensor) or w.dim() != 2 or w.shape[0] < 1 or not w.is_floating_point():
        shown = tuple(w.shape) if isinstance(w, Tensor) else type(w).__name__
        raise ConfigError(f"w must be a floating-point tensor of shape [K, d] with K >= 1, got {shown}")
    return w


def _needs_majority(step: str, K: int, f: int) -> None:
    if K <= 2 * f:
        raise ConfigError(f"pre-aggregation '{step}' needs K > 2*n_byzantine; got K={K}, n_byzantine={f} "
                          f"(allowed: n_byzantine <= {(K - 1) // 2})")


def nnm(w: Tensor, n_byzantine: int) -> Tensor:
    """Nearest-neighbour mixing (Allouah et al., AISTATS 2023, Alg. 1): for each row i,

        N_i = the K − f rows nearest to x_i in ℓ2 (x_i itself included),
        y_i = (1/(K − f)) Σ_{j∈N_i} x_j,

    and the rule then aggregates y_1 … y_K. Distances as Krum's (``torch.cdist`` without the
    matrix-product shortcut); ties broken by the lower row index (a stable sort), so the mix does
    not depend on the thread count. ConfigError unless K > 2f (the paper's n > 2f). Cost: K²
    distances of d entries and K means of K − f rows. ByzFL's ``NNM(f)`` is this step.
    """
    w = _check(w)
    K, f = w.shape[0], n_byzantine
    _needs_majority("nnm", K, f)
    dist = torch.cdist(w, w, compute_mode="donot_use_mm_for_euclid_dist")
    near = dist.argsort(dim=1, stable=True)[:, :K - f].sort(dim=1).values  # each row's neighbours, by index
    return torch.stack([w.index_select(0, near[i]).mean(0) for i in range(K)])


def bucketing(w: Tensor, bucket_size: int, generator: torch.Generator | None) -> Tensor:
    """Bucketing (Karimireddy, He, Jaggi, ICLR 2022, Alg. 1): with a random permutation π of the K
    rows, bucket i averages s consecutive permuted rows,

        y_i = mean(x_π((i−1)s+1), …, x_π(min(is, K))),   i = 1 … ⌈K/s⌉,

    (the last bucket holds the K mod s left over, when s does not divide K), and the rule
    aggregates the ⌈K/s⌉ bucket means. π is ``torch.randperm(K, generator=generator)``; fedpd
    passes the server's stream for the round (purpose "pre_aggregation": :mod:`fedpd.streams`),
    so every engine and a resumed run draw the same π. The paper's analysis needs δ·s ≤ 1/2 for
    a Byzantine share δ = f/K (each Byzantine row can spoil a whole bucket); the rule after it
    must tolerate f bad rows among ⌈K/s⌉ (:meth:`Bucketing.rows_needed` declares the rows it takes,
    so an s for which the rule's own condition fails is refused before anything runs). ByzFL's
    ``Bucketing(s)`` draws π from torch's global generator: seeded alike, the two make the same
    buckets.
    """
    w = _check(w)
    if generator is None:
        raise ConfigError("pre-aggregation 'bucketing' draws a permutation: pass generator (fedpd passes the "
                          "round's server stream)")
    K, s = w.shape[0], bucket_size
    perm = torch.randperm(K, generator=generator).to(w.device)
    return torch.stack([w.index_select(0, perm[start:start + s]).mean(0) for start in range(0, K, s)])


def arc(w: Tensor, n_byzantine: int, reference: Tensor | None = None) -> Tensor:
    """Adaptive robust clipping (Allouah, Guerraoui, Gupta, Jellouli, Rizk, Stephan, ICLR 2025,
    Alg. 1): of the updates Δ_i = x_i − reference, the k = ⌊2 (f/K)(K − f)⌋ of largest norm are
    clipped to the norm of the (k+1)-th largest,

        Δ_i ← Δ_i · min(1, ‖Δ_(k+1)‖ / ‖Δ_i‖),

    the others pass unchanged; the rows returned are reference + Δ_i. Ties in norm: the row of
    lower index counts as larger (a stable sort). k is computed in integers, 2f(K − f) // K.
    ConfigError unless K > 2f (the paper's f < n/2; then k <= K − 1). Without ``reference`` the
    rows themselves are clipped (they are taken as updates): ByzFL's ``ARC(f)``, which computes k
    as int(2f/K·(K − f)) in floating point (the same k unless rounding puts 2f(K − f)/K just below
    an integer it equals).
    """
    w = _check(w)
    K, f = w.shape[0], n_byzantine
    _needs_majority("arc", K, f)
    k = 2 * f * (K - f) // K
    if k == 0:
        return w
    ref = torch.zeros_like(w[0]) if reference is None else reference.to(dtype=w.dtype, device=w.device)
    diff = w - ref
    norms = ordered_norm(diff, dim=1)
    order = torch.argsort(-norms, stable=True)
    bound = norms[order[k]]
    scale = torch.ones_like(norms)
    big = order[:k]
    scale[big] = torch.where(norms[big] > bound, bound / norms[big].clamp_min(torch.finfo(w.dtype).tiny),
                             torch.ones_like(norms[big]))
    return ref + diff * scale[:, None]



# --- the steps as objects ----------------------------------------------------------------------
class Step:
    """A pre-aggregation step, the base of fedpd's and of a plug-in's: constructed with its options
    as keywords (``Options`` validates ``algorithm.aggregator_options`` for it), then called on each
    round's rows. ``name``, ``description`` and ``Options`` are what ``fedpd list`` shows."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Options: ClassVar[type[Options]] = NoOptions

    def __init__(self, **options):
        self.options = options

    def __call__(self, rows: Tensor, reference: Tensor | None = None,
                 generator: torch.Generator | None = None) -> Tensor:
        """The new rows [K', d] of ``rows`` [K, d]; ``reference``: the server model the round started
        from (None: the rows are updates); ``generator``: the round's server stream for this step."""
        raise NotImplementedError

    def rows_needed(self, after: int) -> int:
        """The fewest rows this step takes so that what follows it gets ``after`` rows it accepts
        (the default: a step that keeps the count and needs no more)."""
        return after

    def describe(self) -> str:
        """The step in a message ("after NNM the rule sees …")."""
        return self.name


class ByzantineOptions(Options):
    """The f of a step that needs an honest majority; f = 0 is refused with what the step would do."""

    n_byzantine: int = Field(ge=0, description="f: Byzantine rows tolerated, 1 <= f < K/2")
    #: the step's name and what it does with f = 0, for the refusal
    step: ClassVar[str] = ""
    without_f: ClassVar[str] = ""

    @model_validator(mode="after")
    def _some_byzantine(self):
        if self.n_byzantine == 0:
            raise refuse("n_byzantine", f"0 with pre-aggregation '{self.step}', which then {self.without_f} "
                         f"(allowed: n_byzantine >= 1 and < K/2, or no '{self.step}' in pre)")
        return self


class NNMOptions(ByzantineOptions):
    step: ClassVar[str] = "nnm"
    without_f: ClassVar[str] = "replaces every row by the mean of all K: the defence becomes the plain mean"


class ARCOptions(ByzantineOptions):
    step: ClassVar[str] = "arc"
    without_f: ClassVar[str] = "clips no row: the step does nothing"


class BucketingOptions(Options):
    bucket_size: int = Field(2, ge=1, description="s: rows averaged per bucket")


def _majority(f: int, after: int) -> int:
    """The rows a step that needs K > 2f and keeps K takes to leave ``after``."""
    return max(after, 2 * f + 1)


class NNM(Step):
    __doc__ = nnm.__doc__
    name = "nnm"
    description = "nearest-neighbour mixing: each row replaced by the mean of its K - f nearest (Allouah et al. 2023)"
    Options = NNMOptions

    def __init__(self, n_byzantine: int):
        super().__init__(n_byzantine=n_byzantine)
        self.n_byzantine = n_byzantine

    def __call__(self, rows, reference=None, generator=None):
        return nnm(rows, self.n_byzantine)

    def rows_needed(self, after):
        return _majority(self.n_byzantine, after)

    def describe(self):
        return "NNM"


class Bucketing(Step):
    __doc__ = bucketing.__doc__
    name = "bucketing"
    description = "rows averaged in random buckets of s before the rule (Karimireddy et al. 2022)"
    Options = BucketingOptions

    def __init__(self, bucket_size: int = 2):
        super().__init__(bucket_size=bucket_size)
        self.bucket_size = bucket_size

    def __call__(self, rows, reference=None, generator=None):
        return bucketing(rows, self.bucket_size, generator)

    def rows_needed(self, after):
        return (after - 1) * self.bucket_size + 1  # ⌈K/s⌉ >= after

    def describe(self):
        return f"bucketing (s = {self.bucket_size})"


class ARC(Step):
    __doc__ = arc.__doc__
    name = "arc"
    description = ("adaptive robust clipping: the 2f(K - f)/K longest updates clipped to the next one's norm "
                   "(Allouah et al. 2025)")
    Options = ARCOptions

    def __init__(self, n_byzantine: int):
        super().__init__(n_byzantine=n_byzantine)
        self.n_byzantine = n_byzantine

    def __call__(self, rows, reference=None, generator=None):
        return arc(rows, self.n_byzantine, reference)

    def rows_needed(self, after):
        return _majority(self.n_byzantine, after)

    def describe(self):
        return "ARC"


# --- the registry ------------------------------------------------------------------------------
#: the built-in steps by config name (adding one: a Step subclass here, listed in this tuple)
STEPS: dict[str, type[Step]] = {cls.name: cls for cls in (NNM, Bucketing, ARC)}
#: each step's one line (what ``fedpd list`` shows)
DESCRIPTIONS = {name: cls.description for name, cls in STEPS.items()}


def _a_step(obj, name: str) -> str | None:
    if isinstance(obj, type) and issubclass(obj, Step):
        return None
    return (f"{name} is not a pre-aggregation Step subclass (got {names.what(obj)}; subclass "
            f"fedpd.preaggregators.Step)")


#: what ``algorithm.aggregator_options.pre`` names (:func:`fedpd.names.resolve`)
KIND = names.Kind("pre_aggregation", names.table(*STEPS.values()), check=_a_step,
                  plugin="a pre-aggregation plug-in is a fedpd.preaggregators.Step subclass constructed with its "
                  "options as keywords")


def step_class(name) -> type[Step]:
    """The step ``name`` names: a built-in of :data:`STEPS` or a plug-in (an import path
    ``package.module:Class`` or an installed entry point). A one-line PluginError otherwise."""
    return names.resolve(KIND, name).build


def reads(pre, key: str) -> bool:
    """Whether the steps ``pre`` names (a name or a list, as ``aggregator_options.pre``) read the
    option ``key`` (NNM and ARC read ``n_byzantine``)."""
    return any(key in step_class(s).Options.model_fields for s in ([pre] if isinstance(pre, str) else pre))


def _flat_options() -> type[Options]:
    """The keys of ``aggregator_options`` the built-in steps read, as one model: what ``fedpd list``
    shows beside a rule's own options (a step's required option is unset until a chain names it)."""
    first: dict[str, FieldInfo] = {}
    readers: dict[str, list[str]] = {}
    for name, cls in STEPS.items():
        for key, field in cls.Options.model_fields.items():
            first.setdefault(key, field)
            readers.setdefault(key, []).append(name)
    pre = Field(default_factory=list, description=f"pre-aggregation before the rule, in order: {', '.join(STEPS)} "
                f"or an import path (a name or a list)")
    fields: dict = {"pre": (list[str] | str, pre)}
    for key, field in first.items():
        required = field.is_required()
        described = f"{field.description} ({' and '.join(readers[key])}; refused where nothing reads it)"
        fields[key] = (field.annotation | None if required else field.annotation,
                       FieldInfo.merge_field_infos(field, default=None if required else field.default,
                                                   description=described))
    return create_model("PreOptions", __base__=Options, **fields)


#: the built-in steps' keys of ``aggregator_options`` with ``pre`` (for ``fedpd list``; each step
#: validates its own with its ``Options``)
PreOptions = _flat_options()


def buckets(K: int, s: int) -> int:
    """⌈K/s⌉: the rows bucketing leaves of K."""
    return math.ceil(K / s)
