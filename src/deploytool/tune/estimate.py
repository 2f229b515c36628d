"""A candidate's figure as an estimate with an interval that narrows as evidence grows.

The statistic: the mean of the log per-pass scores (a geometric mean: speeds compare by ratio),
its standard error built from two variance parts, each pooled over every candidate of the search
(as one-way ANOVA pools its error term), and a Student t interval at the space's confidence:

    var(mean of c) = (sigma_b^2 + sigma_w^2 / n) / k     k starts of c, n passes per start

* sigma_w^2, within a start: pass-to-pass noise on one live server (deviations of each pass from
  its own start's mean, over all candidates);
* sigma_b^2, between starts: what a restart adds (the spread of one candidate's start means
  beyond what sigma_w^2 / n explains), from the candidates with two starts or more; before any
  candidate has a second start, the space's `start_noise` stands in for it, and it stays a
  floor until three restarts' worth of evidence (df >= 3) is in.

Pooling is what lets one candidate's interval narrow from other candidates' passes: the noise
is the server's and the machine's, not the flag values'. A t interval rather than a bootstrap
of the median: with 2-6 passes a candidate, a bootstrap's percentiles are the extreme passes
themselves (the [min, max] that only widens), while the pooled t interval's width falls as
1/sqrt(evidence).

Two candidates are told apart when the interval of the ratio of their means (the difference of
the log means, its variance the sum of both) excludes 1; they are *equal* when that interval
lies inside [1/(1+m), 1+m] with m the space's `tie_margin`; a *tie* is a pair that is neither
after the search's evidence is spent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any


@dataclass(frozen=True)
class Noise:
    within: float  # sigma_w^2 of the log score
    df_within: int
    between: float  # sigma_b^2 of the log score
    df_between: int  # 0: the prior (start_noise) stands in

    @property
    def df(self) -> int:
        return max(1, self.df_within + self.df_between)

    def as_dict(self) -> dict[str, Any]:
        return {
            "within_pct": round(100 * math.sqrt(self.within), 3),
            "df_within": self.df_within,
            "between_pct": round(100 * math.sqrt(self.between), 3),
            "df_between": self.df_between,
        }


@dataclass(frozen=True)
class Estimate:
    mean: float  # geometric mean of the pass scores, tok/s/GPU
    low: float
    high: float
    log_mean: float
    se: float  # standard error of log_mean
    passes: int
    starts: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "mean": round(self.mean, 3),
            "low": round(self.low, 3),
            "high": round(self.high, 3),
            "passes": self.passes,
            "starts": self.starts,
        }


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom, else the Cornish-Fisher
    expansion around the normal quantile (within 0.005 of the table from 3 on)."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


def _groups(result: Any) -> list[list[float]]:
    """Log pass scores by start; a pass with no point inside the SLO has no score to log."""
    by_visit: dict[int, list[float]] = {}
    for p in result.passes:
        if p.score:
            by_visit.setdefault(p.visit, []).append(math.log(p.score))
    return [v for _, v in sorted(by_visit.items()) if v]


def pooled_noise(results: list[Any], start_noise: float) -> Noise:
    ss_w, df_w = 0.0, 0
    ss_b, df_b, n_sum, n_count = 0.0, 0, 0.0, 0
    for r in results:
        groups = _groups(r)
        for g in groups:
            m = sum(g) / len(g)
            ss_w += sum((x - m) ** 2 for x in g)
            df_w += len(g) - 1
            n_sum, n_count = n_sum + len(g), n_count + 1
        if len(groups) >= 2:
            means = [sum(g) / len(g) for g in groups]
            grand = sum(means) / len(means)
            ss_b += sum((m - grand) ** 2 for m in means)
            df_b += len(means) - 1
    within = ss_w / df_w if df_w else start_noise**2
    n_bar = n_sum / n_count if n_count else 1.0
    between = max(0.0, ss_b / df_b - within / n_bar) if df_b else start_noise**2
    if df_b < 3:
        # one or two restarts say little about restart noise: the assumed figure stays a floor
        between = max(between, start_noise**2)
    return Noise(within=within, df_within=df_w, between=between, df_between=df_b)


def estimate(result: Any, noise: Noise, confidence: float) -> Estimate | None:
    groups = _groups(result)
    if not groups:
        return None
    k = len(groups)
    means = [sum(g) / len(g) for g in groups]
    n = sum(len(g) for g in groups) / k
    log_mean = sum(means) / k
    se = math.sqrt((noise.between + noise.within / n) / k)
    half = t_quantile(0.5 + confidence / 2, noise.df) * se
    return Estimate(
        mean=math.exp(log_mean),
        low=math.exp(log_mean - half),
        high=math.exp(log_mean + half),
        log_mean=log_mean,
        se=se,
        passes=sum(len(g) for g in groups),
        starts=k,
    )


def ratio_interval(a: Estimate, b: Estimate, noise: Noise, confidence: float) -> tuple[float, float, float]:
    """a / b with its interval (the difference of the log means, variances summed)."""
    d = a.log_mean - b.log_mean
    half = t_quantile(0.5 + confidence / 2, noise.df) * math.sqrt(a.se**2 + b.se**2)
    return math.exp(d), math.exp(d - half), math.exp(d + half)


def beats(a: Estimate, b: Estimate, noise: Noise, confidence: float) -> bool:
    """a is faster than b beyond the noise: the ratio's interval lies above 1."""
    return ratio_interval(a, b, noise, confidence)[1] > 1.0


def equal(a: Estimate, b: Estimate, noise: Noise, confidence: float, margin: float) -> bool:
    """a and b are the same speed to within `margin`: the ratio's interval lies inside
    [1/(1+margin), 1+margin]."""
    _, low, high = ratio_interval(a, b, noise, confidence)
    return margin > 0 and low >= 1 / (1 + margin) and high <= 1 + margin
