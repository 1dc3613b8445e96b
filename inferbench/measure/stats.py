"""Statistics from raw per-iteration latencies measured in rounds, by several worker processes.

Successive iterations on a shared machine are not independent (lag-1 correlation 0.88 measured on
onnxrt), so no interval here resamples single iterations. A cell is measured in R rounds (a block per
round, the cells of a run in a fresh random order each round), and its rounds are spread over P worker
processes (round r by process r mod P, every process of every cell alive side by side). Two things vary:

- **between rounds** within a process: the machine's speed that minute (what interleaving spreads over
  every cell alike, and what pairing within rounds cancels);
- **between processes**: what stays fixed for a worker's whole life (memory layout, thread placement) and
  no round can see. Across invocations this is what moves a cell's median: a constant used to stand in for
  it (1.5%, from six quiet runs); it is now measured.

:func:`spread` fits the one-way random-effects model ``y[r] = mu + b[process(r)] + e[r]`` to the log round
medians ``y`` (a moment estimate of the between-process variance, as in the analysis of variance);
:func:`pool_between` pools that component over the cells of a group (the processes of one cell are few:
the component is a property of the machine and the run, shared by its cells, and each cell contributes its
own degrees of freedom). A cell's p50 interval is then ``p50 * exp(+-t * se)`` with
``se**2 = within / R + between / P`` and Satterthwaite's degrees of freedom. A vs B in the same rounds
(paired): the same model on the per-round log ratios, whose between-process part is the ratio's own, fitted by
process pair and moderated toward the two cells' terms (:func:`ratio_between`). A vs B from different runs
(``compare``): both cells' ``se`` added.

Tail percentiles (p90, p95, p99) are estimated as the p50 is: each round's percentile, the cell's value the
geometric mean of them (each round alike), its interval the same random-effects fit to the log round
percentiles. A level that moves between rounds is then in the interval, as it is in the p50's: an interval from
the order statistics of every sample pooled (the binomial count below the quantile) treated the rounds as one
sample and covered a p99 13-72% of the time when the level moved between rounds (benchmarks/tail_coverage.py).
A round whose samples are too few to hold the percentile inside them (fewer than ``1 / (1 - q)``: 100 for a
p99) gives no interval: "too few samples", never ranked. The percentile of every sample pooled is kept, as
``p99_pooled``, descriptive only.

Percentiles use linear interpolation between closest ranks (NumPy's default 'linear' method,
Hyndman & Fan type 7); tools disagree at small n, so every record names the rule and carries n.

Why one file: the cell's interval, the paired margin and compare's across runs are one random-effects model
of the same log round figures; their estimators share its pieces (the spread, its moderation, t's quantiles).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: Codes recorded with every statistic (docs/results-schema.md spells them out).
PERCENTILE_RULE = "numpy-linear"  # linear interpolation between closest ranks, Hyndman-Fan type 7
CI_METHOD = "rounds-and-processes-t-95"
PAIRED_METHOD = "paired-rounds-and-processes-t-95"
UNPAIRED_METHOD = "unpaired-rounds-and-processes-t-95"
#: Where the between-process part could not be measured (one process, records from before schema 6): the
#: relative standard deviation assumed instead, and the method's mark that says so.
ASSUMED_PROCESS_SD = 0.015
ASSUMED = "+process-sd-assumed-1.5%"
#: A between-process part estimated at 0 from fewer degrees of freedom than this (two or three processes alone, a
#: small group's pooled one) is no evidence that there is none: the assumed part stands in, and the method says so.
#: The stability verdict is judged on the interval so made.
FEW_BETWEEN_DF = 4
#: What a cell measured in one worker process can say of its interval (--quick, --processes 1).
ONE_PROCESS = ("one worker process a cell: the interval covers this process only (the spread between processes, "
               "which a second invocation meets anew, is assumed at 1.5%); --processes 2 measures it")
#: ... and one whose processes ran one round each: their spread cannot be told from the rounds'.
ONE_ROUND_A_PROCESS = ("one round a worker process: the spread between processes cannot be told from the rounds' "
                       "(it is assumed at 1.5%); --rounds of at least twice --processes measures it")
#: What a run of two worker processes a cell says up front: their spread rests on one degree of freedom
#: (docs/method.md's lone-cell table, benchmarks/coverage_wander.py --lone: 83-92% at a 6% process effect).
TWO_PROCESSES = ("two worker processes a cell: what differs between them rests on one degree of freedom, and where "
                 "processes differ by 6% a cell's 95% interval covered its level 83-92% of the time in simulation "
                 "(docs/method.md); three (--processes 3, the default from --rounds 6) cover 93-99%")
TAIL_METHOD = "round-percentiles-median-unbiased-rounds-and-processes-t-95"
Z975 = 1.959964
MIN_ROUNDS = 3  # fewer rounds give no interval
#: Stability verdict thresholds: the p50's 95% interval half-width, and the drift over the rounds (a slope).
UNSTABLE_HALF_WIDTH = 0.10
UNSTABLE_DRIFT = 0.10
TAILS = {"p90": 0.90, "p95": 0.95, "p99": 0.99}

# Student's t, 97.5% quantile, for 1..30 degrees of freedom (beyond: a Cornish-Fisher expansion).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: float) -> float:
    """Student's t 97.5% quantile; a fractional ``df`` (Satterthwaite's) is rounded down: conservative."""
    if not df >= 1:  # (NaN too)
        raise ValueError("need at least one degree of freedom")
    if math.isinf(df):  # Satterthwaite's with no spread in one term: the normal quantile
        return Z975
    df = int(math.floor(df))
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


#: The statistics a comparison can be about: the median (the default), the tail percentiles and the mean (throughput,
#: at a fixed batch size, is the batch over the mean latency). A round's tail percentile is median-unbiased
#: (Hyndman-Fan type 8, NumPy's 'median_unbiased'): the linear rule's is biased low at a round's few hundred samples
#: (simulated, a p99 interval over rounds covered 77% of the time with it, 90% and more with this one).
def _tail(q: float) -> Callable[[np.ndarray], Any]:
    def percentile(x: np.ndarray) -> Any:
        return np.percentile(x, 100 * q, method="median_unbiased")

    return percentile


STATISTICS: dict[str, Callable[[np.ndarray], Any]] = {"p50": np.median, "mean": np.mean,
                                                      **{f"p{round(q * 100)}": _tail(q) for q in (0.90, 0.95, 0.99)}}
#: Latencies as a list or an array.
Samples = Sequence[float] | np.ndarray


#: A round is starved, and not counted, when it holds fewer than this many samples and fewer than this fraction of
#: its cell's median round: a block stops on time, so a round the machine stalled holds a handful of very slow calls,
#: and weighed as much as a full round it dragged the centre out of the samples' own range (torch-inductor
#: read 53.4 ms [9.1-313.8] where its samples' median was 24.1 ms and their p75 36.0 ms, two rounds holding 3 and 2
#: calls at 269 and 712 ms). Rounds of a scenario that holds few samples a round by design are alike: none starved.
STARVED_SAMPLES, STARVED_FRACTION = 5, 1 / 8


def starved_rounds(rounds: Sequence[int] | None) -> dict[int, int]:
    """The rounds not counted (:data:`STARVED_SAMPLES`), each with its sample count."""
    if rounds is None or len(rounds) == 0:
        return {}
    keys, counts = np.unique(np.asarray(rounds, dtype=int), return_counts=True)
    floor = min(STARVED_SAMPLES, float(np.median(counts)) * STARVED_FRACTION)
    return {int(k): int(c) for k, c in zip(keys, counts) if c < floor}


def counted_sizes(rounds: Sequence[int] | None, n: int) -> list[int]:
    """The sample count of each counted round (``n`` samples, one round when ``rounds`` is None)."""
    if rounds is None:
        return [n] if n else []
    starved = starved_rounds(rounds)
    keys, counts = np.unique(np.asarray(rounds, dtype=int), return_counts=True)
    return [int(c) for k, c in zip(keys, counts) if int(k) not in starved]


def round_stats(latencies: Samples, rounds: Sequence[int] | None, stat: str = "p50") -> dict[int, float]:
    """``stat`` of each counted round's latencies (one round when ``rounds`` is None: a record from before rounds;
    starved rounds left out: :func:`starved_rounds`)."""
    x = np.asarray(latencies, dtype=np.float64)
    r = np.zeros(x.size, dtype=int) if rounds is None else np.asarray(rounds, dtype=int)
    if r.size != x.size:
        raise ValueError(f"{x.size} latencies but {r.size} round indices")
    f, starved = STATISTICS[stat], starved_rounds(rounds)
    return {int(k): float(f(x[r == k])) for k in np.unique(r) if int(k) not in starved}


def centre(latencies: Samples, rounds: Sequence[int] | None, stat: str = "p50") -> float:
    """The cell's ``stat`` as its interval describes it: the geometric mean of its rounds' statistics, each round
    weighted alike. A block stops on time, so a fast round holds more samples than a slow one, and the statistic of
    all samples pooled leans towards the fast rounds: one run ranked OpenVINO at a pooled 0.605 ms whose six round
    medians had a geometric mean of 3.49 ms. (A round whose statistic is not positive: the pooled statistic.)"""
    per_round = np.array(list(round_stats(latencies, rounds, stat).values()), dtype=np.float64)
    if per_round.size == 0 or not np.all(per_round > 0):
        return float(STATISTICS[stat](np.asarray(latencies, dtype=np.float64)))
    if per_round.size == 1:  # one round: its statistic, exactly
        return float(per_round[0])
    return float(np.exp(np.log(per_round).mean()))


def round_medians(latencies: Samples, rounds: Sequence[int] | None) -> dict[int, float]:
    """Median latency of each round."""
    return round_stats(latencies, rounds, "p50")


# --------------------------------------------------------------------------- the spread of an estimate
@dataclass(frozen=True)
class Spread:
    """How much a cell's log statistic varies between its rounds (within a process) and between its processes."""

    rounds: int
    processes: int
    within_var: float  # of the log round statistics, within a process (pooled over processes)
    within_df: int
    between_var: float | None  # the between-process component (this cell's own moment estimate); None: unmeasured
    between_df: int  # processes - 1
    between_raw: float | None = None  # the estimate before clipping at 0 (what pooling averages: no upward bias)
    lag1: float | None = None  # the rounds' lag-1 correlation in time order, bias-corrected (None: too few rounds)
    drift_factor: float = 1.0  # what that correlation makes of the rounds' variance of their mean (wander_factor)

    def se(self, between_var: float | None = None, between_df: float | None = None,
           sides: int = 1, whole: bool | None = None) -> tuple[float, float]:
        """(standard error of the cell's log estimate, Satterthwaite's degrees of freedom); ``between_var`` (a
        pooled one) in place of the cell's own; where none was measured, the assumed component, once per cell the
        estimate is of (``sides``: 2 for a paired ratio of two cells).

        ``whole`` (by default: where the term is this fit's own, no ``between_var`` given): the term is this fit's
        mean square of process means less its within's (or one moderated from it), so the within cancels out of se²
        and the term's degrees of freedom count for the whole (exact for a cell's own: its processes', ``processes -
        1``). Counted for the between part alone beside the within, Satterthwaite's rule gave 2.7 where the processes
        give 2 (12 rounds in 3 processes at a 6% process effect), and the interval covered 90% of the time; so
        counted, 93.5% (benchmarks/coverage_wander.py --lone). From :data:`WHOLE_FROM_DF` degrees of freedom. Not
        whole: a term from elsewhere (the group's pooled value, one fitted on other rounds) beside this fit's within,
        each with its own count, or a paired ratio's moderated toward the sum of its cells' terms (which holds more
        than the ratio does where a shared machine state cancels in it: covered 92-99% so,
        benchmarks/coverage_paired.py)."""
        used = self.between_used(between_var, between_df)
        within = self.within_var * self.drift_factor / self.rounds
        parts: list[tuple[float, float]] = [(within, self.within_df)]
        if used is None:
            parts.append((sides * (ASSUMED_PROCESS_SD ** 2) / self.processes, math.inf))
        elif (between_var is None if whole is None else whole) and used[1] >= WHOLE_FROM_DF:  # (wander: within's)
            parts = [(self.within_var / self.rounds + used[0] / self.processes, used[1]),
                     (within - self.within_var / self.rounds, self.within_df)]
        else:
            parts.append((used[0] / self.processes, used[1]))
        var = sum(v for v, _ in parts)
        denominator = sum(v * v / df for v, df in parts if v > 0 and df < math.inf)
        # nothing but the assumed part (known, unbounded degrees of freedom): t's limit, not the rounds' count
        df = var * var / denominator if denominator > 0 else 1e6 if var > 0 else max(self.within_df, 1)
        return math.sqrt(var), max(1.0, min(df, 1e6))

    def given(self, between: tuple[float | None, int] | None, own: bool = False) -> tuple[float, float]:
        """:meth:`se` with ``between`` (a pooled (variance, df), None: the fit's own), ``own`` where it was moderated
        from this fit's own (counted as its own is)."""
        var, dof = between if between else (None, None)
        return self.se(var, dof, whole=True if own else None)

    def between_used(self, between_var: float | None = None,
                     between_df: float | None = None) -> tuple[float, float] | None:
        """The between-process (variance, df) an interval uses: ``between_var`` (a pooled one) in place of the
        cell's own; None where none was measured, or where it came out at 0 from fewer than
        :data:`FEW_BETWEEN_DF` degrees of freedom: that is no evidence that there is none, so the assumed part
        stands in (the method says so), never a term of 0."""
        b = self.between_var if between_var is None else between_var
        bdf = self.between_df if between_df is None else between_df
        if b is None or bdf < 1 or (b <= 0 and bdf < FEW_BETWEEN_DF):
            return None
        return b, bdf

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def process_of(rounds: Sequence[int], processes: int | Mapping[int, int] | None) -> dict[int, int]:
    """The process of each round: a mapping as given, round mod ``processes`` for a count, one process for None."""
    if isinstance(processes, Mapping):
        return {int(k): int(v) for k, v in processes.items()}
    count = int(processes or 1)
    return {int(r): int(r) % count for r in set(rounds)}


def spread(per_round: Mapping[int, float], processes: Mapping[int, int]) -> Spread | None:
    """The one-way random-effects fit to log round statistics ``per_round`` (round -> value > 0) grouped by
    ``processes`` (round -> process); None with fewer than :data:`MIN_ROUNDS` rounds."""
    rounds = sorted(per_round)
    if len(rounds) < MIN_ROUNDS or any(per_round[r] <= 0 for r in rounds):
        return None
    y = {r: math.log(per_round[r]) for r in rounds}
    groups: dict[int, list[float]] = {}
    for r in rounds:
        groups.setdefault(processes.get(r, 0), []).append(y[r])
    n, k = len(rounds), len(groups)
    grand = sum(y.values()) / n
    ss_within = sum((v - sum(g) / len(g)) ** 2 for g in groups.values() for v in g)
    within_df = n - k
    if within_df < 1:  # one round per process: no within-process spread to separate
        rho = wander([y[r] - grand for r in rounds])
        return Spread(n, k, float(np.var(list(y.values()), ddof=1)), n - 1, None, 0, None, rho, wander_factor(rho, n))
    means = {p: sum(g) / len(g) for p, g in groups.items()}
    rho = wander([y[r] - means[processes.get(r, 0)] for r in rounds])
    msw, factor = ss_within / within_df, wander_factor(rho, n)
    if k < 2:
        return Spread(n, 1, msw, within_df, None, 0, None, rho, factor)
    msb = sum(len(g) * (sum(g) / len(g) - grand) ** 2 for g in groups.values()) / (k - 1)
    n0 = (n - sum(len(g) ** 2 for g in groups.values()) / n) / (k - 1)  # unbalanced one-way ANOVA
    raw = (msb - msw) / n0
    return Spread(n, k, msw, within_df, max(0.0, raw), k - 1, raw, rho, factor)


#: Rounds below this give no lag-1 correlation (their variance of the mean taken as independent rounds').
WANDER_MIN_ROUNDS = 5
#: The largest correlation the correction takes (beyond it the interval is said to be unreliable, not widened more).
WANDER_MAX = 0.95
#: A process term of fewer degrees of freedom is counted for its between part alone (:meth:`Spread.se`): from one
#: (two processes) the exact count's t of 12.7 made a lone cell's interval about twice as wide for 1-4 points of
#: coverage (benchmarks/coverage_wander.py --lone); two processes are said to cover less instead (TWO_PROCESSES).
WHOLE_FROM_DF = 2
#: A stability verdict calls round levels wandering from this corrected correlation on, with this many rounds.
WANDERING, WANDERING_ROUNDS = 0.8, 8


def wander(residuals: Sequence[float]) -> float | None:
    """The lag-1 correlation of the rounds' residuals (each round's log statistic less its process's mean) in the
    order the rounds ran, bias-corrected as Kendall's (1954) ``rho + (1 + 3 rho) / n`` and clipped to [0,
    :data:`WANDER_MAX`]; None below :data:`WANDER_MIN_ROUNDS` rounds. A machine whose speed wanders (an AR(1) level
    from round to round, not a straight line) makes neighbouring rounds alike: their spread then understates how far
    their mean is from the long run's (simulated at a correlation of 0.5, a cell's interval covered its level 76-82%
    of the time, 0.8: 44-53%)."""
    n = len(residuals)
    e = np.asarray(residuals, dtype=np.float64)
    if n < WANDER_MIN_ROUNDS or not np.any(e):
        return None
    rho = float(np.sum(e[:-1] * e[1:]) / np.sum(e * e))
    return min(max(rho + (1 + 3 * rho) / n, 0.0), WANDER_MAX)


def wander_factor(rho: float | None, n: int) -> float:
    """How much an AR(1) correlation ``rho`` between ``n`` successive rounds makes the variance of their mean exceed
    what their own spread says: ``Var(mean) / (E[s^2] / n)``, exact for n rounds (1 where ``rho`` is None or 0)."""
    if not rho:
        return 1.0
    k = np.arange(1, n)
    var_mean = (1 + 2 * float(np.sum((1 - k / n) * rho ** k))) / n
    expected_s2 = n / (n - 1) * (1 - var_mean)
    return var_mean / (expected_s2 / n)


def pool_between(spreads: Sequence[Spread | None]) -> tuple[float | None, int]:
    """The between-process variance pooled over cells (their raw moment estimates weighted by degrees of
    freedom, then clipped at 0) and its degrees of freedom; (None, 0) when no cell had two processes."""
    usable = [s for s in spreads if s is not None and s.between_raw is not None and s.between_df > 0]
    df = sum(s.between_df for s in usable)
    if not df:
        return None, 0
    return max(0.0, sum(float(s.between_raw or 0.0) * s.between_df for s in usable) / df), df


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float] | None:
    """The Wilson score interval (95% by default) of a proportion of ``k`` in ``n`` (None where ``n`` is 0): unlike
    the normal approximation it stays inside [0, 1] and covers near 0 and 1, where agreement rates sit."""
    if n <= 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference(a: int, b: int, c: int, d: int, z: float = 1.959964) -> tuple[float, float] | None:
    """The 95% interval of the difference of two proportions measured on the same items (Newcombe 1998, method 10:
    the two Wilson intervals combined with the outcomes' correlation, its numerator ad - bc corrected by n/2 towards
    0): ``a`` items right in both, ``b`` right in the first only, ``c`` in the second only, ``d`` in neither; the
    difference is (b - c) / n. None where n is 0."""
    n = a + b + c + d
    if n <= 0:
        return None
    p1, p2 = (a + b) / n, (a + c) / n
    (l1, u1), (l2, u2) = wilson(a + b, n, z), wilson(a + c, n, z)  # type: ignore[misc]
    den = (a + b) * (c + d) * (a + c) * (b + d)
    cross: float = a * d - b * c
    cross = cross - n / 2 if cross > n / 2 else 0.0 if cross >= 0 else cross
    phi = cross / math.sqrt(den) if den else 0.0
    delta = p1 - p2
    lo = delta - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = delta + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return max(-1.0, lo), min(1.0, hi)


def _chi2_95(df: int) -> float:
    """The chi-square distribution's 95% quantile (Wilson-Hilferty; within 1% from 3 degrees of freedom)."""
    return df * (1 - 2 / (9 * df) + 1.644854 * math.sqrt(2 / (9 * df))) ** 3


def _digamma(x: float) -> float:
    shift = 0.0
    while x < 6:
        shift -= 1 / x
        x += 1
    return shift + math.log(x) - 1 / (2 * x) - 1 / (12 * x ** 2) + 1 / (120 * x ** 4) - 1 / (252 * x ** 6)


def _trigamma(x: float) -> float:
    shift = 0.0
    while x < 6:
        shift += 1 / (x * x)
        x += 1
    return shift + 1 / x + 1 / (2 * x ** 2) + 1 / (6 * x ** 3) - 1 / (30 * x ** 5) + 1 / (42 * x ** 7)


def _trigamma_inverse(y: float) -> float:
    """The x > 0 whose trigamma is ``y`` (trigamma falls from infinity to 0: bisection on a log scale)."""
    lo, hi = 1e-8, 1e8
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _trigamma(mid) > y else (lo, mid)
    return math.sqrt(lo * hi)


@dataclass(frozen=True)
class Shrunk:
    """A cell's between-process variance as its interval uses it: its own estimate moderated toward the group's by
    how much the group's cells differ beyond what their few processes can tell apart."""

    var: float | None  # the between-process variance used (None: no cell of the group measured one)
    df: float  # its degrees of freedom
    weight: float  # of the cell's own mean square (0: the group's, 1: its own)
    group_var: float | None  # the group's pooled value (pool_between)
    group_df: int
    prior_df: float | None  # the moderating prior's degrees of freedom (inf: the cells alike)
    heterogeneous: bool  # the cells' mean squares differ beyond their sampling (a 95% chi-square test)


def shrink_between(spreads: Sequence[Spread | None]) -> list[Shrunk]:
    """Each cell's between-process term moderated by the group's (empirical Bayes on the log mean squares, as
    limma moderates gene-wise variances, Smyth 2004): each cell's between-process mean square ``msb`` (``processes
    - 1`` degrees of freedom; its expectation ``within + rounds a process x between``) is one draw of a
    scaled chi-square around the cell's own; the cells' spread of ``log msb`` beyond that sampling fits a prior
    (``prior_df``, its scale), and each cell's moderated mean square is ``(prior_df s0 + df msb) / (prior_df +
    df)``, with ``prior_df + df`` degrees of freedom. Alike cells take the group's value (a cell's two or three
    processes alone measure it poorly). A cell's own measured spread is never moderated downward: where its own
    between-process variance is the larger, it keeps it with its own degrees of freedom (a runtime whose processes
    differ far more than the others'; pooled, one run read ONNX Runtime's p50 +-138% from OpenVINO's spread, and
    simulated, the pooled term covered such a runtime's level 63% of the time, the moderated one alone 77%)."""
    group_var, group_df = pool_between(spreads)
    out = [Shrunk(group_var, float(group_df), 0.0, group_var, group_df, None, False) for _ in spreads]
    usable = [i for i, s in enumerate(spreads)
              if s is not None and s.between_raw is not None and s.between_df > 0 and s.processes > 1]
    if group_var is not None and len(usable) == 1:  # the group's value is that cell's own
        out[usable[0]] = dataclasses.replace(out[usable[0]], weight=1.0)
    if group_var is None or len(usable) < 2:
        return out
    msb, df, n0 = {}, {}, {}
    for i in usable:
        s = spreads[i]
        assert s is not None
        n0[i] = s.rounds / s.processes  # rounds a process
        msb[i] = max(s.within_var + n0[i] * float(s.between_raw or 0.0), 1e-300)
        df[i] = float(s.between_df)
    z = {i: math.log(msb[i]) - _digamma(df[i] / 2) + math.log(df[i] / 2) for i in usable}
    mean = sum(z.values()) / len(z)
    excess = sum((z[i] - mean) ** 2 for i in usable) / (len(z) - 1) - sum(_trigamma(df[i] / 2) for i in usable) / len(z)
    chi = sum((z[i] - mean) ** 2 / _trigamma(df[i] / 2) for i in usable)
    heterogeneous = chi > _chi2_95(len(z) - 1)
    if excess > 0:
        prior_df = 2 * _trigamma_inverse(excess)
        prior = math.exp(mean + _digamma(prior_df / 2) - math.log(prior_df / 2))
    else:  # no more spread than sampling: the cells alike, the group's value
        prior_df, prior = math.inf, math.exp(mean)
    for i in usable:
        s = spreads[i]
        assert s is not None
        if math.isinf(prior_df):
            var, dof, weight = group_var, float(group_df), 0.0
        else:
            moderated = (prior_df * prior + df[i] * msb[i]) / (prior_df + df[i])
            var, dof = max(0.0, (moderated - s.within_var) / n0[i]), min(prior_df + df[i], 1e6)
            weight = df[i] / (prior_df + df[i])
        if (s.between_var or 0.0) > var:  # its own spread, larger: never moderated down by the others'
            var, dof, weight = float(s.between_var or 0.0), df[i], 1.0
        out[i] = Shrunk(var, dof, weight, group_var, group_df, prior_df, heterogeneous)
    return out


# --------------------------------------------------------------------------- one cell
def interval(latencies: Samples, rounds: Sequence[int] | None, stat: str = "p50",
             processes: int | Mapping[int, int] | None = None, between: tuple[float | None, int] | None = None,
             own: bool = False) -> tuple[float, float, float] | None:
    """95% interval of ``stat`` (of :data:`STATISTICS`) and the value it is centred on, the geometric mean of the
    rounds' statistics (:func:`centre`): (low, high, value); ``between``: a pooled (variance, df) of the
    between-process part in place of the cell's own (``own``: moderated from this cell's own fit of the same
    rounds, counted as its own is: :meth:`Spread.se`). None with fewer than 3 rounds."""
    per_round = round_stats(latencies, rounds, stat)
    fit = spread(per_round, process_of(list(per_round), processes))
    if fit is None:
        return None
    value = centre(latencies, rounds, stat)
    se, df = fit.given(between, own)
    half = t975(df) * se
    return value * math.exp(-half), value * math.exp(half), value


def median_interval(latencies: Samples, rounds: Sequence[int] | None,
                    processes: int | Mapping[int, int] | None = None,
                    between: tuple[float | None, int] | None = None, own: bool = False) -> tuple[float, float] | None:
    """95% interval of the p50 from the rounds and the processes, or None with fewer than 3 rounds."""
    found = interval(latencies, rounds, "p50", processes, between, own)
    return None if found is None else found[:2]


def needed_samples(q: float) -> int:
    """Samples a round needs before its ``q`` quantile lies inside them, not at or beyond its largest sample: 100 for
    a p99, 20 for a p95, 10 for a p90 (a round with fewer gives its tail no interval)."""
    return math.ceil(round(1 / (1 - q), 9))


def tail_interval(latencies: Samples, rounds: Sequence[int] | None, stat: str,
                  processes: int | Mapping[int, int] | None = None, between: tuple[float | None, int] | None = None,
                  ) -> tuple[float, float, float] | None:
    """A tail percentile's (``stat``: p90, p95 or p99) 95% interval and value, as the p50's (:func:`interval`) over
    the rounds' percentiles; None when a round has fewer samples than :func:`needed_samples` or there are fewer
    than 3 rounds."""
    r = np.zeros(len(latencies), dtype=int) if rounds is None else np.asarray(rounds, dtype=int)
    counts = counted_sizes(rounds, r.size)
    if not counts or min(counts) < needed_samples(TAILS[stat]):
        return None
    return interval(latencies, rounds, stat, processes, between)


POOLED_RESAMPLES, POOLED_SAMPLES_MAX = 200, 20_000


def pooled_interval(latencies: Samples, rounds: Sequence[int] | None, q: float) -> tuple[float, float] | None:
    """A 95% interval of the whole run's ``q`` percentile (every sample pooled: the tail a user of the whole run met,
    where the rounds' figure is a typical round's), by resampling whole rounds with replacement (a round's samples
    move together: level shifts between rounds are what widen it; seeded): the pooled percentile · exp(± t · sd),
    sd the resamples' log spread, t Student's on rounds - 1 (a percentile bootstrap covered 71% with 8 rounds under
    ±30% level shifts, this 87%; the rounds' typical-round interval covers that target 60%). None below
    :data:`MIN_ROUNDS` rounds."""
    x = np.asarray(latencies, dtype=np.float64)
    r = np.zeros(x.size, dtype=int) if rounds is None else np.asarray(rounds, dtype=int)
    order = np.argsort(r, kind="stable")
    parts = np.split(x[order], np.flatnonzero(np.diff(r[order])) + 1)
    if len(parts) < MIN_ROUNDS:
        return None
    rng = np.random.default_rng(0)
    step = max(1, x.size // POOLED_SAMPLES_MAX)  # the resamples' spread from every step-th sample of each round
    parts = [part[::step] for part in parts]  # (the centre below from every sample)
    found = [float(np.percentile(np.concatenate([parts[i] for i in rng.integers(0, len(parts), len(parts))]),
                                 100 * q)) for _ in range(POOLED_RESAMPLES)]
    centre_log, sd = math.log(float(np.percentile(x, 100 * q))), float(np.std(np.log(found), ddof=1))
    half = t975(len(parts) - 1) * sd  # the resamples' spread, Student's t on the rounds: few rounds, wider
    return math.exp(centre_log - half), math.exp(centre_log + half)


def effective_n(latencies: Samples, rounds: Sequence[int] | None) -> float:
    """The sample count discounted for the correlation of successive iterations within a round (lag-1,
    AR(1)'s ``n (1 - rho) / (1 + rho)``); the round-to-round level is taken out first."""
    x = np.log(np.asarray(latencies, dtype=np.float64))
    r = np.zeros(x.size, dtype=int) if rounds is None else np.asarray(rounds, dtype=int)
    pairs_a, pairs_b = [], []
    for k in np.unique(r):
        v = x[r == k]
        v = v - np.median(v)
        if v.size > 2:
            pairs_a.append(v[:-1])
            pairs_b.append(v[1:])
    if not pairs_a:
        return float(x.size)
    a, b = np.concatenate(pairs_a), np.concatenate(pairs_b)
    rho = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else 0.0
    rho = min(max(rho, 0.0), 0.99)
    return x.size * (1 - rho) / (1 + rho)


def stability(latencies: Samples, rounds: Sequence[int] | None,
              processes: int | Mapping[int, int] | None = None,
              between: tuple[float | None, int] | None = None, own: bool = False) -> dict[str, Any]:
    """Is the p50 estimate stable? From the data alone: the interval's half-width (rounds and processes), the drift
    over the rounds (the least-squares slope of the log round medians times the rounds' span), and whether the
    rounds' level wanders (:func:`wander`: their lag-1 correlation, which the interval is widened for)."""
    meds = round_medians(latencies, rounds)
    if len(meds) < MIN_ROUNDS:
        return {"verdict": "unknown", "rounds": len(meds), "half_width": None, "drift": None,
                "advice": f"fewer than {MIN_ROUNDS} rounds, so no interval: measure with --rounds {MIN_ROUNDS} or more"}
    fit = spread(meds, process_of(list(meds), processes))
    assert fit is not None  # three rounds or more
    se, df = fit.given(between, own)
    half = math.expm1(t975(df) * se)
    order = sorted(meds)
    xs, ys = np.asarray(order, dtype=np.float64), np.log([meds[r] for r in order])
    slope = float(np.polyfit(xs, ys, 1)[0]) if xs.std() > 0 else 0.0
    drift = math.expm1(slope * (xs.max() - xs.min()))
    reasons = []
    if half > UNSTABLE_HALF_WIDTH:
        reasons.append(f"rounds and processes disagree (p50 +-{half:.0%})")
    if abs(drift) > UNSTABLE_DRIFT:
        reasons.append(f"p50 drifted {drift:+.0%} over the rounds")
    wandering = fit.lag1 is not None and fit.lag1 >= WANDERING and fit.rounds >= WANDERING_ROUNDS
    if wandering:
        reasons.append(f"round medians wander (neighbouring rounds alike: lag-1 correlation {fit.lag1:.2f}; the "
                       f"interval widened x{math.sqrt(fit.drift_factor):.1f} for it)")
    advice = "" if not reasons else "; ".join(reasons) + \
        ": run more rounds (--rounds) or on a quieter machine before trusting small differences"
    verdict = "unstable" if reasons else "stable"
    if verdict == "stable" and fit.between_var is None and (between is None or between[0] is None):
        # never "stable" on a spread nobody measured
        verdict, advice = "unknown", ONE_PROCESS if fit.processes == 1 else ONE_ROUND_A_PROCESS
    return {"verdict": verdict, "rounds": len(meds), "half_width": half,
            "drift": drift, "drift_method": "log-median-slope-over-rounds", "lag1": fit.lag1,
            "widened": math.sqrt(fit.drift_factor), "wandering": wandering, "advice": advice}


def summarize(latencies_ms: Samples, rounds: Sequence[int] | None = None,
              processes: int | Mapping[int, int] | None = None,
              between: tuple[float | None, int] | None = None, own: bool = False) -> dict[str, Any]:
    """Summary of per-iteration latencies in milliseconds (the ``latency_ms`` block of a record). ``processes``:
    the process of each round (or their count); ``between``: the group's pooled between-process variance (``own``:
    the p50's own, moderated toward the group's; the tails', fitted on other statistics, take it as the group's)."""
    x = np.asarray(latencies_ms, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        raise ValueError("no latency samples")
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    p25, p50, p75, p90, p95, p99 = (float(v) for v in np.percentile(x, [25, 50, 75, 90, 95, 99]))
    ci = median_interval(x, rounds, processes, between, own)
    per_round = round_medians(x, rounds)
    fit = spread(per_round, process_of(list(per_round), processes))
    tails: dict[str, Any] = {}
    for name in TAILS:  # each round's percentile, as the p50: the rounds' centre and its interval
        tail = tail_interval(x, rounds, name, processes, between)
        tails[name], tails[f"{name}_pooled"] = centre(x, rounds, name), {"p90": p90, "p95": p95, "p99": p99}[name]
        tails[f"{name}_ci95"] = None if tail is None else list(tail[:2])
    whole = pooled_interval(x, rounds, TAILS["p99"])  # the whole run's p99, which a user of the run met
    tails["p99_pooled_ci95"] = None if whole is None else list(whole)
    starved = starved_rounds(rounds)
    fewest = min(counted_sizes(rounds, n))  # (never every round starved: at most half fall below the median's 1/8)
    too_few = [name for name, q in TAILS.items() if fewest < needed_samples(q)]  # in a round: no interval
    n_eff = effective_n(x, rounds)
    spread_block = None if fit is None else {
        **fit.as_dict(), "pooled_between_var": None if between is None else between[0],
        "pooled_between_df": None if between is None else between[1],
        **dict(zip(("se_log", "df"), fit.given(between, own))),
        "measured": fit.between_used(*(between or (None, None))) is not None}
    return {
        "n": n, "mean": mean, "std": std, "cv": std / mean if mean > 0 else float("nan"),
        "min": float(x.min()), "max": float(x.max()),
        "p25": p25, "p50": centre(x, rounds), "p50_pooled": p50, "p75": p75, "iqr": p75 - p25,
        "p50_ci95": None if ci is None else list(ci),
        **tails,
        "n_effective": n_eff,
        "tails_too_few_samples": too_few,
        "tail_method": TAIL_METHOD,
        "percentile_rule": PERCENTILE_RULE,
        "ci_method": CI_METHOD + ("" if spread_block and spread_block["measured"] else ASSUMED),
        "rounds_not_counted": [{"round": k, "samples": c} for k, c in sorted(starved.items())],
        "spread": spread_block,
        "stability": stability(x, rounds, processes, between, own),
    }


# --------------------------------------------------------------------------- two cells
@dataclass(frozen=True)
class Sample:
    """A cell's raw latencies as a comparison needs them: the rounds, the process of each round, and the
    group's pooled between-process variance (None: unmeasured, assumed)."""

    latencies: Sequence[float]
    rounds: Sequence[int] | None
    processes: Mapping[int, int] | int | None = None
    between: tuple[float | None, int] | None = None
    invocation_var: float | None = None  # the machine's measured variance between invocations (calibration)
    invocation_df: float | None = None  # its degrees of freedom (None: unknown, taken as 1)


def compare(a: Sample, b: Sample, paired: bool, stat: str = "p50") -> dict[str, Any]:
    """A's statistic over B's (of :data:`STATISTICS`), with a 95% interval and whether it excludes 1.

    ``paired``: A and B were measured in the same rounds of one run (their round indices pair up): the per-round log
    ratios, their between-process part the ratio's own (:func:`ratio_between`). Unpaired: both cells' standard
    errors, each with its rounds and processes. ``ci95`` and ``significant`` are None with fewer than 3 rounds on a
    side.
    """
    ma, mb = round_stats(a.latencies, a.rounds, stat), round_stats(b.latencies, b.rounds, stat)
    common = sorted(set(ma) & set(mb))
    if paired and len(common) >= MIN_ROUNDS:
        pa, pb = process_of(common, a.processes), process_of(common, b.processes)
        ratios = {r: ma[r] / mb[r] for r in common}
        fit = spread(ratios, {r: pa[r] * 1000 + pb[r] for r in common})
        assert fit is not None  # (MIN_ROUNDS rounds, every ratio > 0)
        between = ratio_between(fit, a, b)
        assumed = between is None
        # the ratio's own alone: its count, exact; moderated toward its cells' (more than it holds): theirs
        whole = cells_prior(a, b) is None
        se, df = fit.se(between[0], between[1], sides=2, whole=whole) if between else fit.se(None, 0, sides=2)
        mean = float(np.mean(np.log(list(ratios.values()))))
        method = PAIRED_METHOD
    else:
        # what each side ranks, and what its interval describes: the rounds' centre of the statistic
        mean = math.log(centre(a.latencies, a.rounds, stat) / centre(b.latencies, b.rounds, stat))
        sides = [log_centre(s, stat) for s in (a, b)]
        if sides[0] is None or sides[1] is None:
            return {"ratio": math.exp(mean), "ci95": None, "significant": None, "method": "none-too-few-rounds",
                    "rounds": min(len(ma), len(mb))}
        parts = [(se, df) for _, se, df in (sides[0], sides[1])]
        method, assumed = UNPAIRED_METHOD, any(assumes_between(s, stat) for s in (a, b))
        invocation = max(((s.invocation_var, s.invocation_df or 1.0) for s in (a, b) if s.invocation_var is not None),
                         default=None)
        if invocation is not None:  # what differs between invocations and no run can see, measured on this machine
            parts.append((math.sqrt(2 * invocation[0]), invocation[1]))  # once per side, with its calibration's df
            method += "+invocation-calibrated"
        se = math.sqrt(sum(p[0] ** 2 for p in parts))
        denominator = sum(p[0] ** 4 / p[1] for p in parts)  # Satterthwaite's degrees of freedom over the parts
        df = se ** 4 / denominator if denominator > 0 else 1.0
        common = list(range(min(len(ma), len(mb))))
    half = t975(df) * se
    lo, hi = math.exp(mean - half), math.exp(mean + half)
    return {"ratio": math.exp(mean), "ci95": [lo, hi], "significant": not lo <= 1.0 <= hi,
            "method": method + (ASSUMED if assumed else ""), "rounds": len(common), "df": df}


def ratio_between(fit: Spread, a: Sample, b: Sample) -> tuple[float, float] | None:
    """The between-process variance of a paired ratio and its degrees of freedom: the ratio's own, fitted by process
    pair (``fit``: a machine state both cells share cancels in it, which it does not in each cell's own), moderated
    toward the sum of the two cells' own terms (their group's, :func:`shrink_between`) by degrees of freedom, never
    below the ratio's own estimate. None where neither measured one above 0: the caller's assumed floor, said.

    Adding the cells' terms instead (the rule before this one) lost the process part whenever a shared machine state
    hid it in each cell: simulated (benchmarks/coverage_paired.py: 2-3 processes, 6-12 rounds, process offsets
    2-6%, a 10% state shared within a round, heavy-tailed samples; 1,000 trials a case) the paired margin covered
    77.8-90.7%, this 92.4-98.8%. The switch to the assumed floor where the estimate is 0 is deliberate: a process
    term estimated at 0 from one or two degrees of freedom is not evidence that there is none.
    """
    own = fit.between_raw if fit.between_raw is not None and fit.between_df > 0 else None
    prior = cells_prior(a, b)
    if own is None:
        return prior if prior and prior[0] > 0 and prior[1] >= 1 else None
    var, df = max(own, 0.0), float(fit.between_df)
    if prior and prior[1] >= 1:
        moderated = (prior[1] * prior[0] + df * own) / (prior[1] + df)
        if moderated > var:
            var, df = moderated, prior[1] + df
    return (var, df) if var > 0 else None


def cells_prior(a: Sample, b: Sample) -> tuple[float, float] | None:
    """What a paired ratio's between-process part is moderated toward: the sum of its two cells' own terms (as
    their group moderated them) with the fewer degrees of freedom; None where either cell has none."""
    if a.between and b.between and a.between[0] is not None and b.between[0] is not None:
        return a.between[0] + b.between[0], float(min(a.between[1], b.between[1]))
    return None


def assumes_between(s: Sample, stat: str = "p50") -> bool:
    """Whether a side's interval takes the assumed between-process part (:func:`assumed_part`)."""
    return assumed_part(round_stats(s.latencies, s.rounds, stat), s.processes, s.between)


def assumed_part(per_round: Mapping[int, float], processes: int | Mapping[int, int] | None,
                 between: tuple[float | None, int] | None = None) -> bool:
    """Whether an interval over ``per_round`` takes the assumed between-process part (:meth:`Spread.between_used`):
    none measured, or one of 0 from few degrees of freedom (True too with too few rounds for any interval)."""
    fit = spread(per_round, process_of(list(per_round), processes))
    return fit is None or fit.between_used(*(between or (None, None))) is None


def log_centre(s: Sample, stat: str = "p50") -> tuple[float, float, float] | None:
    """A cell's log centre of ``stat`` (what it ranks) with the standard error a comparison between runs gives it
    (its rounds and worker processes, its group's measured between-process part, else the assumed one) and that
    error's degrees of freedom; None with fewer than :data:`MIN_ROUNDS` rounds."""
    per_round = round_stats(s.latencies, s.rounds, stat)
    fit = spread(per_round, process_of(list(per_round), s.processes))
    if fit is None:
        return None
    se, df = fit.se(*(s.between or (None, None)))
    return math.log(centre(s.latencies, s.rounds, stat)), se, df


def invocation_excess(runs: Sequence[tuple[float, float, float, Any]]) -> dict[str, Any] | None:
    """What differs between invocations of one cell beyond what each run's own interval already holds, from plain
    runs of it: each run's log centre, its standard error and that error's degrees of freedom (:func:`log_centre`),
    and a key of the runs comparable with it (one machine speed). The between-run variance within keys (pooled,
    ``between_df`` = runs - keys) less the mean squared standard error (the method-of-moments random-effects estimate,
    as DerSimonian and Laird's with equal weights), never below 0: ``compare`` adds it to each side's own error, which
    the raw spread between runs would count twice. ``df``: the excess's own, by Satterthwaite's rule for a difference
    of two variance estimates (far fewer than the runs': it is what an interval may lean on), at least 1. None with no
    key holding two runs."""
    groups: dict[Any, list[tuple[float, float, float]]] = {}
    for value, se, se_df, key in runs:
        groups.setdefault(key, []).append((value, se, se_df))
    ss = sum((v - sum(x for x, _, _ in g) / len(g)) ** 2 for g in groups.values() for v, _, _ in g)
    between_df = sum(len(g) - 1 for g in groups.values())
    if between_df < 1:
        return None
    total = ss / between_df
    used = [(se, se_df) for g in groups.values() if len(g) > 1 for _, se, se_df in g]
    within = sum(se * se for se, _ in used) / len(used)
    spread_of_within = sum(se ** 4 / max(se_df, 1.0) for se, se_df in used)  # each error's own uncertainty
    within_df = within ** 2 * len(used) ** 2 / spread_of_within if spread_of_within > 0 else math.inf
    excess = max(0.0, total - within)
    parts = total ** 2 / between_df + within ** 2 / within_df
    df = min(between_df, max(1, int(excess ** 2 / parts))) if excess > 0 and parts > 0 else between_df
    return {"sd": math.sqrt(excess), "df": df, "between_df": between_df, "total_sd": math.sqrt(total),
            "within_se": math.sqrt(within), "runs": sum(len(g) for g in groups.values())}


def geometric_mean(ratios: Sequence[tuple[float, float]]) -> dict[str, Any] | None:
    """The geometric mean of several ratios, each given with the standard error of its log (as pyperf's
    ``compare_to`` prints one), with a normal 95% interval; None without any."""
    if not ratios:
        return None
    logs = np.log([r for r, _ in ratios])
    se = math.sqrt(sum(s * s for _, s in ratios)) / len(ratios)
    mean = float(logs.mean())
    return {"ratio": math.exp(mean), "ci95": [math.exp(mean - Z975 * se), math.exp(mean + Z975 * se)],
            "cells": len(ratios)}


def paired_blocks(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """A over B from blocks measured in adjacent pairs in one process (the benchmarks' method): the geometric mean
    of the pairs' ratios with a paired t 95% interval (None with fewer than 2 pairs)."""
    logs = np.log(np.asarray(a, dtype=np.float64) / np.asarray(b, dtype=np.float64))
    mean = float(np.mean(logs))
    if logs.size < 2:
        return {"ratio": float(np.exp(mean)), "ci95": None, "pairs": int(logs.size)}
    half = t975(logs.size - 1) * float(np.std(logs, ddof=1)) / math.sqrt(logs.size)
    return {"ratio": float(np.exp(mean)), "ci95": [float(np.exp(mean - half)), float(np.exp(mean + half))],
            "pairs": int(logs.size)}


def iid_compare(a_ms: Sequence[float], b_ms: Sequence[float], seed: int = 0) -> dict[str, Any]:
    """The interval the scripts inferbench replaces (and inferbench before rounds) gave: a bootstrap over single
    iterations, as if they were independent. Kept only to show, in tests and benchmarks, how it fails."""
    a, b = np.asarray(a_ms, dtype=np.float64), np.asarray(b_ms, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ratios = np.array([np.median(a[rng.integers(0, a.size, a.size)]) / np.median(b[rng.integers(0, b.size, b.size)])
                       for _ in range(1000)])
    lo, hi = (float(v) for v in np.quantile(ratios, [0.025, 0.975]))
    return {"ratio": float(np.median(a) / np.median(b)), "ci95": [lo, hi], "significant": not lo <= 1.0 <= hi}


def widest_interval(cells: Sequence[tuple[Mapping[int, float], int]]) -> dict[str, Any] | None:
    """Of a group's cells, each its median per round and its worker processes (round r in process r mod P), the widest
    95% interval the answer's latency ratios can have now: each cell's median over the group's fastest, paired
    within rounds as :func:`compare` pairs them (the process part the ratio's own where its processes measured
    one, else assumed: the cells' own, moderated by the group, are known only when the group ends); a group of
    one cell: its own median's (:func:`interval`). ``half``: the half-width as a share (+-), ``cell`` and
    ``against`` the cells' indices, ``ratio`` and ``ci95``. None before 3 rounds."""
    live = [(i, m, p) for i, (m, p) in enumerate(cells) if m]
    if not live:
        return None

    def sample(m: Mapping[int, float], p: int) -> Sample:
        return Sample(list(m.values()), list(m), p)

    out: dict[str, Any] | None
    if len(live) == 1:
        i, m, p = live[0]
        found = interval(list(m.values()), list(m), "p50", p)
        if found is None:
            return None
        out = {"cell": i, "against": None, "ratio": found[2], "ci95": [found[0], found[1]]}
    else:
        best = min(live, key=lambda c: centre(list(c[1].values()), list(c[1])))
        out = None
        for i, m, p in live:
            if i == best[0]:
                continue
            cmp: dict[str, Any] = compare(sample(m, p), sample(best[1], best[2]), paired=True)
            if cmp["ci95"] is None:
                return None
            if out is None or cmp["ci95"][1] / cmp["ci95"][0] > out["ci95"][1] / out["ci95"][0]:
                out = {"cell": i, "against": best[0], "ratio": cmp["ratio"], "ci95": cmp["ci95"]}
    assert out is not None
    return {**out, "half": math.sqrt(out["ci95"][1] / out["ci95"][0]) - 1}


def process_floor(processes: int) -> float:
    """The half-width (a share, +-) below which no number of rounds takes a paired ratio's 95% interval: its part
    for what differs between worker processes, at its assumed size (1.5% a cell, two cells, ``processes`` each)."""
    return math.exp(1.959964 * math.sqrt(2 * ASSUMED_PROCESS_SD ** 2 / processes)) - 1


def net_interval(value: float, per_round: Mapping[int, float], processes: int | Mapping[int, int] | None,
                 shifts: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """A 95% interval around a net figure (energy per inference less an idle baseline's): the rounds' part as
    :func:`per_round_interval`'s (on the log scale, carried to the figure's own by its value) and ``shifts``, each
    the standard error and degrees of freedom of an error every round of a process shares (its baseline's), added
    in quadrature, Satterthwaite's degrees of freedom; symmetric, its lower end at least 0 (a net figure is the
    load's own). None with fewer than 3 rounds or a round whose net figure is not above 0."""
    fit = spread(per_round, process_of(list(per_round), processes))
    if fit is None or value <= 0:
        return None
    se_log, df = fit.se()
    found = satterthwaite([((value * se_log) ** 2, df), *((sd * sd, float(d)) for sd, d in shifts)])
    if found is None:
        return None
    half = t975(math.inf if found[1] is None else found[1]) * found[0]
    return max(0.0, value - half), value + half


def satterthwaite(parts: Sequence[tuple[float, float]]) -> tuple[float, float | None] | None:
    """The standard error of a sum of independent variances, each with its degrees of freedom, and Satterthwaite's
    degrees of freedom for it (None: unbounded, every part with a finite count being 0); None where a part has fewer
    than one."""
    var = sum(v for v, _ in parts)
    finite = [(v, d) for v, d in parts if v > 0 and math.isfinite(d)]
    if any(d < 1 for _, d in finite):
        return None
    dof = var * var / sum(v * v / d for v, d in finite) if finite else math.inf
    return math.sqrt(var), None if math.isinf(dof) else dof


def per_round_interval(value: float, per_round: Mapping[int, float], processes: int | Mapping[int, int] | None,
                       ) -> tuple[float, float] | None:
    """A 95% interval around ``value`` from a statistic measured once per round (energy per inference, say),
    with the rounds' and the processes' parts as for latency; None with fewer than 3 rounds."""
    fit = spread(per_round, process_of(list(per_round), processes))
    if fit is None or value <= 0:
        return None
    se, df = fit.se()
    half = t975(df) * se
    return value * math.exp(-half), value * math.exp(half)
