"""Faults and attacks, one per run, set in the config's ``[attack]`` section: the catalogue, one
module per kind.

Who misbehaves: ``parties`` (explicit ids) or else a ``fraction`` of the N parties, the last
:func:`fedpd.problems.poisoning.party_count` (fraction, N) of a permutation seeded by the attack's
own ``seed`` (so the same parties whatever the run's seed). The count is fraction · N rounded half
up, and at least one party when fraction > 0 — the rule Fed+'s MNIST-robust uses for its negated
parties too. The kinds, every one declaring its options beside itself:

* :mod:`~fedpd.attacks.data` — data attacks (outliers by data), applied to the chosen parties'
  samples when the problem is built (the transforms: :mod:`fedpd.problems.poisoning`):
  ``negate_inputs`` and ``label_flip``.
* :mod:`~fedpd.attacks.update` — update attacks, applied by the server side of the round
  (:mod:`fedpd.protocol`) to the chosen participants' uploads before they are screened:
  ``sign_flip`` (u ← r − factor·(u − r)), ``scale`` (u ← r + factor·(u − r)), ``gaussian``
  (u ← u + std·N(0, I)), and three that see the round's honest uploads: ``alie`` ("a little is
  enough": honest mean − z·std), ``ipm`` (inner-product manipulation: −ε · honest mean) and
  ``mimic`` (a copy of one honest upload, Karimireddy et al. 2022).
* :mod:`~fedpd.attacks.optimal` — ``optimal_alie`` / ``optimal_ipm``, whose z or ε is searched
  each round against the defence in use (the run's aggregator and pre-aggregation, simulated:
  :meth:`Attack.against`).
* :mod:`~fedpd.attacks.faults` — ``nan`` and ``inf`` uploads (rejected and counted by the upload
  screen, :mod:`fedpd.screen`) and ``dropout``: the chosen participants receive the round's
  message and then drop out — no upload, no state change, counted as ``dropouts``.
* :mod:`~fedpd.attacks.backdoor` — ``backdoor`` (Bagdasaryan et al. 2020) is both: a trigger
  stamped on a share of the chosen parties' training samples, relabelled to a target class, when
  the problem is built, and their uploads scaled (model replacement), optionally constrained to a
  norm, in each round. The metrics then add ``backdoor_acc`` (:mod:`fedpd.evaluation`).

For uploads that are models (the algorithm's ``model_uploads``) r is the model the server sent this
round, so an update attack acts on the update; uploads that are updates already (its
``update_uploads``: SCAFFOLD's Δx, Δc) have r = 0; anything else (a sample count) is left alone
(:class:`~fedpd.attacks.base.UpdateAttack`'s one loop, shared by every kind that changes uploads).

With ``probability`` < 1 a chosen party misbehaves in each round independently (intermittent
faults); nothing happens before ``start_round``. The coin and the noise come from each party's
own stream (purpose "attack" or "dropout", the round, its id: :mod:`fedpd.streams`), so they do
not depend on which other parties take part, in what order, or where they run.

A new attack is a class in the module of its kind (or a plug-in: docs/extending.md) and a place in
:data:`ATTACKS`, which the registry reads by name.
"""

from __future__ import annotations

import warnings

from fedpd import screen as _screen
from fedpd.attacks.backdoor import Backdoor, BackdoorOptions
from fedpd.attacks.base import (DEFAULT_FRACTION, Attack, OmniscientAttack, RoundAttackOptions, State, TargetOptions,
                                UpdateAttack)
from fedpd.attacks.data import DataAttack, DataAttackOptions, LabelFlip, NegateInputs
from fedpd.attacks.faults import Dropout, InfUpload, NaNUpload
from fedpd.attacks.optimal import OptimalALIE, OptimalAttack, OptimalIPM, OptimalOptions, line_search
from fedpd.attacks.update import (ALIE, IPM, ALIEOptions, Gaussian, GaussianOptions, IPMOptions, Mimic, MimicOptions,
                                  Scale, ScaleOptions, SignFlip, SignFlipOptions, top_direction_row)
from fedpd.errors import ConfigError
from fedpd.options import validate
from fedpd.problems import poisoning as _poisoning

ATTACKS = (Attack, NegateInputs, LabelFlip, SignFlip, Scale, Gaussian, NaNUpload, InfUpload, ALIE, IPM, Mimic,
           OptimalALIE, OptimalIPM, Backdoor, Dropout)


def make_attack(name: str, **options) -> Attack:
    """The attack ``name`` with ``options`` checked by its options model (defaults filled in)."""
    built_in = {a.name: a for a in ATTACKS}
    if name not in built_in:
        raise ConfigError(f"attack.name: unknown attack {name!r} (allowed: {', '.join(built_in)}; a plug-in is named "
                          f"in a config's attack.name)")
    cls = built_in[name]
    return cls(**validate(cls.Options, options, "attack").model_dump())


# names this module held before they moved beside the data and the round protocol, kept for one release
_MOVED = {name: _poisoning for name in ("party_count", "num_classes", "transform_parties", "trigger_count",
                                        "apply_trigger", "poisoned_rows")}
_MOVED.update({name: _screen for name in ("screen", "finite_rows")})


def __getattr__(name: str):
    if name in _MOVED:
        where = _MOVED[name].__name__
        warnings.warn(f"fedpd.attacks.{name} moved to {where}.{name}; import it from there (the old name goes in "
                      f"the next release)", DeprecationWarning, stacklevel=2)
        return getattr(_MOVED[name], name)
    raise AttributeError(f"module 'fedpd.attacks' has no attribute {name!r}")


__all__ = ["ALIE", "ATTACKS", "DEFAULT_FRACTION", "IPM", "ALIEOptions", "Attack", "Backdoor", "BackdoorOptions",
           "DataAttack", "DataAttackOptions", "Dropout", "Gaussian", "GaussianOptions", "IPMOptions", "InfUpload",
           "LabelFlip", "Mimic", "MimicOptions", "NaNUpload", "NegateInputs", "OmniscientAttack", "OptimalALIE",
           "OptimalAttack", "OptimalIPM", "OptimalOptions", "RoundAttackOptions", "Scale", "ScaleOptions",
           "SignFlip", "SignFlipOptions", "State", "TargetOptions", "UpdateAttack", "line_search", "make_attack",
           "top_direction_row"]
