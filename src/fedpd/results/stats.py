"""Numbers over seeds: the mean, the sample standard deviation, n and the t-based confidence interval
of the mean (Student's t with n − 1 degrees of freedom, exact: no scipy, no torch — ``fedpd compare``
starts in a fraction of a second). The reproductions' paired verdicts use the same quantiles."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

#: the confidence level of every interval fedpd prints
LEVEL = 0.95


def t_cdf2(t: float, df: int) -> float:
    """P(|T| ≤ t) of Student's t with an integer ``df`` ≥ 1, exact (the closed form in θ = atan(t/√df):
    Abramowitz & Stegun 26.7.3–4)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"t distribution: df must be a positive integer, got {df}")
    th = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(th) ** 2, math.sin(th)
    if df % 2:  # odd: (2/π)(θ + sinθ cosθ (1 + 2/3 cos²θ + ... + (2·4···(df−3))/(1·3···(df−2)) cos^(df−3)θ))
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (th + s * math.cos(th) * total)
    term, total = 1.0, 1.0  # even: sinθ (1 + 1/2 cos²θ + ... + (1·3···(df−3))/(2·4···(df−2)) cos^(df−2)θ)
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 ≤ p < 1) of Student's t with an integer ``df``: t_{0.975, 2} = 4.303
    (bisection on :func:`t_cdf2`, to double precision)."""
    if not 0.5 <= p < 1:
        raise ValueError(f"t quantile: p must be in [0.5, 1), got {p}")
    target, lo, hi = 2 * p - 1, 0.0, math.pi / 2  # bisect θ = atan(t/√df) on [0, π/2)
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_cdf2(math.sqrt(df) * math.tan(mid), df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-16:
            break
    return math.sqrt(df) * math.tan((lo + hi) / 2)


@dataclass(frozen=True)
class Summary:
    """The mean of n values, their sample standard deviation (n − 1) and the t-interval of the mean at
    :data:`LEVEL`; ``sd`` and the interval are None below two values. A value that is missing
    (None: a run that diverged, or did not record the metric) makes every part None: a mean over
    the seeds that are left would hide it."""

    n: int
    mean: float | None
    sd: float | None = None
    low: float | None = None
    high: float | None = None


def summarise(values: list, level: float = LEVEL) -> Summary:
    """:class:`Summary` of ``values`` (numbers or None), in their order."""
    n = len(values)
    if not n or any(v is None or isinstance(v, bool) or not math.isfinite(v) for v in values):
        return Summary(n, None)
    mean = statistics.fmean(values)
    if n < 2:
        return Summary(n, mean)
    sd = statistics.stdev(values)
    half = t_quantile((1 + level) / 2, n - 1) * sd / math.sqrt(n)
    return Summary(n, mean, sd, mean - half, mean + half)
