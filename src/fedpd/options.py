"""Options: every configurable thing declares its options beside itself, as a pydantic model.

An algorithm, solver, sampler, problem, aggregator or attack carries ``name``, ``description``
and ``Options`` (the model that validates its config section); :mod:`fedpd.registry` collects
them and :mod:`fedpd.config` validates a config against them. Cross-field rules live in the
model too (a ``model_validator`` raising :func:`refuse`), so a constructor never checks an
option again.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from fedpd.errors import ConfigError

T = TypeVar("T")

#: the largest seed: every seed becomes a torch or numpy seed (torch takes at most 2^64 − 1, and
#: derived seeds add small offsets), so config seeds stop at 2^63 − 1
SEED_MAX = 2**63 - 1


#: the most steps or iterations of one loop per round (local steps, a party's E_k, inner steps, an
#: iterative aggregator's cap): orders of magnitude above what any paper runs; a larger count is a
#: typo, or a round that would not finish
STEPS_MAX = 100_000

#: the most passes over its data a client makes per round (``solver.local_epochs``; papers run 1 to
#: 20) and the most evaluations of a simulated defence an attack makes per round (the optimal
#: attacks' ``evals``; their authors run 20): each is a round's work times the count, so a larger one
#: is a typo, or a round that would not finish
EPOCHS_MAX = 1_000
EVALS_MAX = 1_000

#: torch CPU threads (``run.threads``): torch takes a C int; no machine gives one process more cores
THREADS_MAX = 1024

#: every integer option is at most what torch and numpy take (int64): a larger one would reach them
#: and fail there; an option's own bound (what it is used for) is usually far below
INT_MIN, INT_MAX = -2**63, 2**63 - 1
#: every real option is at most this in size: no option means anything near it, and its square or
#: cube (FedAdam's τ², a variance) stays a float where a larger one overflows in Python's arithmetic
FLOAT_MAX = 1e100


class Options(BaseModel):
    """Base of every section's options: strict types, unknown keys rejected, no inf or nan,
    every integer (in lists and tables too) an int64, every real number at most 1e100 in size, and
    a path option (``path``, ``*_dir``, ``*_path``) whose ``~user`` names a user of this machine."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _representable(cls, value):
        big = _too_large(value)
        if isinstance(big, float):
            raise ValueError(f"{big:g} is out of range (allowed: numbers of at most {FLOAT_MAX:g} in size)")
        if big is not None:
            raise ValueError(f"{shown(big)} is out of range (allowed: integers of at most {INT_MAX}, 2^63 − 1, in "
                             f"size)")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _home_known(cls, value, info):
        name = info.field_name or ""
        if isinstance(value, str) and value.startswith("~") and (name == "path" or name.endswith(("_dir", "_path"))):
            try:
                Path(value).expanduser()
            except RuntimeError:  # ~someone who has no home here
                user = value[1:].split("/", 1)[0]
                raise ValueError(f"{value!r} starts with ~{user}, but this machine has no user {user!r} (allowed: "
                                 f"~/..., ~<a user of this machine>/..., or a path without ~)") from None
        return value

    def given(self, *keys: str) -> list[str]:
        """The keys among ``keys`` that the config sets to a value other than their default, in the
        order asked: what a cross-field rule refuses where the chosen combination would ignore them.
        A key restated at its default is not given — a run's own ``config.toml`` states every option
        (the resolved config), so a default there says nothing of what its user asked for."""
        fields = type(self).model_fields
        return [k for k in keys if k in self.model_fields_set
                and getattr(self, k) != fields[k].get_default(call_default_factory=True)]


def _too_large(value, depth: int = 0):
    """The first number in ``value`` (lists, tuples, dicts searched) beyond int64 or
    :data:`FLOAT_MAX`, or None."""
    if isinstance(value, float):
        return value if abs(value) > FLOAT_MAX else None
    if isinstance(value, int) and not isinstance(value, bool):
        return value if not INT_MIN <= value <= INT_MAX else None
    if depth < 50 and isinstance(value, (list, tuple, dict)):
        for item in (value.values() if isinstance(value, dict) else value):
            found = _too_large(item, depth + 1)
            if found is not None:
                return found
    return None


class NoOptions(Options):
    pass


def refuse(key: str, message: str) -> ValueError:
    """The error a cross-field validator raises: ``key`` (within the section) and what is allowed.
    The config layer prefixes the section: "algorithm.virtual_dual: needs dual_mean = 'all'"."""
    return ValueError(f"{key}: {message}")


def declares(name: str, options: type[Options], description: str) -> Callable[[T], T]:
    """Give a builder function what a class declares with attributes: its config name, options
    model and one-line description (what ``fedpd list`` shows)."""

    def mark(obj: T) -> T:
        obj.name, obj.Options, obj.description = name, options, description  # type: ignore[attr-defined]
        return obj

    return mark


def validate(model: type[BaseModel], values: dict, where: str, also: tuple[str, ...] = ()) -> BaseModel:
    """``values`` checked by ``model``; ConfigError with one line naming ``where.key`` otherwise
    (``also``: keys the caller takes besides the model's, listed as allowed)."""
    try:
        return model.model_validate(values)
    except ValidationError as err:
        raise ConfigError(_format(where, err, model, also)) from None


def _format(where: str, err: ValidationError, model: type[BaseModel], also: tuple[str, ...]) -> str:
    # an unknown key first: it is most likely a misspelling of the required key also reported missing
    e = min(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    key = ".".join(str(p) for p in (where, *e["loc"]))
    if e["type"] == "extra_forbidden":
        allowed = ", ".join([*also, *model.model_fields]) or "none"
        return f"{key}: unknown key (allowed: {allowed})"
    if e["type"] == "missing":
        return f"{key}: missing required key"
    if e["type"] == "value_error" and "error" in e.get("ctx", {}):  # a cross-field rule (refuse)
        return f"{key}.{e['ctx']['error']}" if not e["loc"] else f"{key}: {e['ctx']['error']}"
    return f"{key}: {e['msg'][0].lower() + e['msg'][1:]} (got {shown(e['input'])})"


def shown(value, limit: int = 80) -> str:
    """``repr(value)`` for a one-line message, cut to ``limit`` characters (a value may be long)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        # (Python refuses to write an integer of more than 4 300 digits; nobody reads one in a line)
        return f"an integer of about {round(value.bit_length() * math.log10(2))} digits"
    try:
        text = repr(value)
    except ValueError:  # such an integer inside a list or table
        return f"a {type(value).__name__} holding an integer too long to show"
    return text if len(text) <= limit else f"{text[:limit - 5]} ...{text[-1] if text[-1] in ')]}' else ''}"
