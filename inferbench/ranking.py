"""The one ranking rule and the one "is A really faster than B?" sentence, for the terminal summary,
``comparisons.csv``, reports and notebooks alike.

Only a cell that ran and whose outputs were checked against the reference (parity passed) is ranked:
a cell that failed parity, or whose outputs could not be checked (a framework with its own weights),
is shown but never a winner, runner-up, baseline, podium or frontier entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

RANKED_PARITY = ("passed",)
T = TypeVar("T")
COMPARISON_COLUMNS = ("model", "resolution", "batch_size", "precision", "framework", "baseline", "ratio",
                      "ratio_ci_low", "ratio_ci_high", "significant", "verified", "method")


def ranked(status: str, parity_status: str) -> bool:
    return status == "ok" and parity_status in RANKED_PARITY


def contenders(rows: Iterable[T], status: Callable[[T], str], parity: Callable[[T], str],
               p50: Callable[[T], float]) -> list[T]:
    """The ranked rows of one group (same model, resolution, batch size, precision, device), fastest
    first: the first is "fastest", the second the runner-up it is compared with."""
    return sorted((r for r in rows if ranked(status(r), parity(r))), key=p50)


def display_name(framework: str, precision: str = "fp32", variant: str = "") -> str:
    """Framework key, with the precision where the key does not already say it and the variant
    (``torch:bf16``, ``torch+compile``)."""
    name = framework if precision == "fp32" or framework.endswith(precision) else f"{framework}:{precision}"
    return f"{name}+{variant}" if variant else name


def record_name(record: Mapping[str, Any]) -> str:
    return display_name(record["framework"], record.get("precision", "fp32"), record.get("variant", ""))


def _group(record: Mapping[str, Any]) -> str | None:
    timing = record.get("timing")
    return timing.get("group") if isinstance(timing, Mapping) else record.get("timing.group")


def comparison(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """A's median latency over B's from two records (or rows of :func:`inferbench.results.load`): paired
    within rounds when they were measured in the same group of the same run, else unpaired."""
    from .measure.stats import compare

    group = _group(a)
    return compare(a["raw_latencies_ms"], a.get("raw_rounds"), b["raw_latencies_ms"], b.get("raw_rounds"),
                   paired=group is not None and group == _group(b))


def verdict(a_name: str, a: Mapping[str, Any], b_name: str, b: Mapping[str, Any]) -> str:
    """"A is 2.4x the speed of B [95% CI 2.2-2.6x]" or "no significant difference"."""
    cmp = comparison(a, b)
    ratio = cmp["ratio"]
    if cmp["ci95"] is None:
        return (f"{a_name} is {1 / ratio:.2f}x the speed of {b_name} "
                "(no interval: fewer than 3 rounds, or measured before rounds)")
    lo, hi = cmp["ci95"]
    if not cmp["significant"]:
        return (f"{a_name} vs {b_name}: no significant difference "
                f"(speed ratio {1 / ratio:.3f} [95% CI {1 / hi:.3f}-{1 / lo:.3f}])")
    return f"{a_name} is {1 / ratio:.2f}x the speed of {b_name} [95% CI {1 / hi:.2f}-{1 / lo:.2f}x]"


def comparison_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``comparisons.csv``: per (model, resolution, batch size, precision), every cell that ran against the
    fastest verified cell (the baseline): ratio = its median latency / the baseline's, with the interval."""
    rows = []
    key = ("model", "resolution", "batch_size", "precision")
    for group in sorted({tuple(r[k] for k in key) for r in records}, key=str):
        cells = [r for r in records if tuple(r[k] for k in key) == group and r["status"] == "ok"
                 and r.get("raw_latencies_ms")]
        best = contenders(cells, lambda r: r["status"], lambda r: r["parity"]["status"],
                          lambda r: r["latency_ms"]["p50"])
        if not best:
            continue
        base = best[0]
        for r in sorted(cells, key=lambda r: r["latency_ms"]["p50"]):
            cmp = comparison(r, base) if r is not base else {"ratio": 1.0, "ci95": None, "significant": None,
                                                             "method": "baseline"}
            ci = cmp["ci95"] or [None, None]
            rows.append(dict(zip(key, group)) | {
                "framework": record_name(r), "baseline": record_name(base), "ratio": cmp["ratio"],
                "ratio_ci_low": ci[0], "ratio_ci_high": ci[1], "significant": cmp["significant"],
                "verified": ranked(r["status"], r["parity"]["status"]), "method": cmp["method"]})
    return rows
