"""Simulated latencies with a known truth that is not the estimators' own model, shared by the tests of the
estimators (tests/test_measure.py) and the coverage benchmarks (benchmarks/tail_coverage.py)."""

from __future__ import annotations

import math

import numpy as np

#: A shifted gamma's quantiles (shape 2, scale 0.5), sampled once: the iterations' distribution within a round.
GAMMA_Q = np.sort(np.random.default_rng(99).gamma(2.0, 0.5, 200_001))


def tail_cell(rng, shift, rho=0.5, rounds=8, round_s=1.0, scale=1.0):
    """One simulated cell: each round at a level the machine set that minute (uniform, 1 +- ``shift``; not the
    lognormal the estimator's fit assumes), its iterations a shifted gamma (not lognormal) with AR(1)-correlated
    noise, each round stopped on time (a fast round holds more samples)."""
    xs, rs = [], []
    for r in range(rounds):
        relative = rng.uniform(1 - shift, 1 + shift)
        level, n = scale * relative, int(round_s / (0.005 * relative))  # 5 ms an iteration at level 1
        u = rng.normal(size=n)
        e = np.empty(n)
        e[0] = u[0]
        for i in range(1, n):
            e[i] = rho * e[i - 1] + math.sqrt(1 - rho * rho) * u[i]
        gamma = GAMMA_Q[np.clip(((np.tanh(e / 1.6) + 1) / 2 * (GAMMA_Q.size - 1)).astype(int), 0, GAMMA_Q.size - 1)]
        xs += list(level * (4.0 + gamma))
        rs += [r] * n
    return np.array(xs), rs


def true_tail(q, shift, rho=0.5):
    """The quantity the rounds' centre estimates: the q quantile of one round's iterations at the geometric-mean
    level, E[log level] of the uniform level exact, the within-round quantile from a long simulated round."""
    a, b = 1 - shift, 1 + shift
    log_level = 0.0 if shift == 0 else (b * math.log(b) - b - a * math.log(a) + a) / (b - a)
    xs, _ = tail_cell(np.random.default_rng(7), 0.0, rho, rounds=1, round_s=2000.0)
    return math.exp(log_level) * float(np.percentile(xs, 100 * q))


def paired_cells(rng, process_sd, state_sd, processes=3, rounds=6, react_b=1.0, levels=(2.0, 3.0), n=150):
    """Two cells measured in the same rounds of one run, as :class:`inferbench.measure.stats.Sample` s with their
    group's moderated between-process terms (as a run records them), and the true ratio of their medians. Each worker
    process sets each cell's level anew (uniform, +-sqrt(3) ``process_sd``: not the lognormal the fit assumes), each
    round a machine state both cells share (a two-sided Laplace of sd ``state_sd``; cell B reacts ``react_b`` of
    it), each iteration a shifted gamma with 3% spikes of 1.5-4x."""
    from inferbench.measure import stats

    width = math.sqrt(3) * process_sd
    state = rng.laplace(0, state_sd / math.sqrt(2), rounds)
    cells = []
    for level, react in zip(levels, (1.0, react_b)):
        offsets = rng.uniform(-width, width, processes)
        xs, rs = [], []
        for r in range(rounds):
            gamma = GAMMA_Q[rng.integers(0, GAMMA_Q.size, n)]
            x = level * math.exp(offsets[r % processes] + react * state[r]) * (4.0 + gamma)
            spikes = rng.random(n) < 0.03
            x[spikes] *= rng.uniform(1.5, 4.0, int(spikes.sum()))
            xs += list(x)
            rs += [r] * n
        cells.append((xs, rs))
    fits = [stats.spread(m, stats.process_of(list(m), processes))
            for m in (stats.round_stats(xs, rs, "p50") for xs, rs in cells)]
    shrunk = stats.shrink_between(fits)
    samples = [stats.Sample(xs, rs, processes, None if s.var is None else (s.var, int(s.df)))
               for (xs, rs), s in zip(cells, shrunk)]
    return samples[0], samples[1], levels[0] / levels[1]


def energy_cells(rng, process_sd, state_sd, processes, rounds):
    """Two cells' energy per inference, one figure a round (as ``energy.per_round_j_per_inference``), in the same
    rounds: each worker process's level set anew (uniform, sd ``process_sd``), a machine state both share each round
    (Laplace, sd ``state_sd``), the counter's noise Student's t with 3 degrees of freedom scaled to 2%; no
    between-process prior (an energy margin has none). Returns both samples and the true ratio."""
    from inferbench.measure import stats

    width, state = math.sqrt(3) * process_sd, rng.laplace(0, state_sd / math.sqrt(2), rounds)
    cells = []
    for level in (2.0, 3.0):
        offsets = rng.uniform(-width, width, processes)
        noise = 0.02 * rng.standard_t(3, rounds) / math.sqrt(3)
        cells.append(stats.Sample([level * math.exp(offsets[r % processes] + state[r] + noise[r])
                                   for r in range(rounds)], list(range(rounds)), processes))
    return cells[0], cells[1], 2.0 / 3.0


def wandering_cell(rng, phi, rounds=12, processes=3, level_sd=0.05, process_sd=0.0, n=150):
    """One cell whose machine wanders: each round's level an AR(1) step from the last (correlation ``phi``, a
    stationary log sd of ``level_sd``: a drift that comes and goes, not a straight line and not the estimator's
    one-way model), each worker process's own offset (uniform, sd ``process_sd``), each iteration a shifted gamma.
    The truth its p50 interval should cover: :data:`WANDERING_TRUTH` (the iterations' median at the stationary
    level)."""
    levels = np.empty(rounds)
    levels[0] = rng.normal(0, level_sd)
    for r in range(1, rounds):
        levels[r] = phi * levels[r - 1] + math.sqrt(1 - phi * phi) * rng.normal(0, level_sd)
    width = math.sqrt(3) * process_sd
    offsets = rng.uniform(-width, width, processes)
    xs, rs = [], []
    for r in range(rounds):
        xs += list(math.exp(levels[r] + offsets[r % processes]) * (4.0 + GAMMA_Q[rng.integers(0, GAMMA_Q.size, n)]))
        rs += [r] * n
    return np.array(xs), rs


WANDERING_TRUTH = 4.0 + float(np.median(GAMMA_Q))
