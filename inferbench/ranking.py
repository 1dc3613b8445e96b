"""The one ranking rule and the one "is A really faster than B?" sentence, for the terminal summary,
reports and notebooks alike.

Only a cell that ran and whose outputs were checked (parity passed) or need no check is ranked; a
cell that failed parity is shown but never a winner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from .measure.stats import compare_medians

RANKED_PARITY = ("passed", "not_applicable")
T = TypeVar("T")


def ranked(status: str, parity_status: str) -> bool:
    return status == "ok" and parity_status in RANKED_PARITY


def contenders(rows: Iterable[T], status: Callable[[T], str], parity: Callable[[T], str],
               p50: Callable[[T], float]) -> list[T]:
    """The ranked rows of one group (same model, resolution, batch size, device), fastest first: the
    first is "fastest", the second the runner-up it is compared with."""
    return sorted((r for r in rows if ranked(status(r), parity(r))), key=p50)


def display_name(framework: str, precision: str = "fp32", variant: str = "") -> str:
    """Framework key, with the precision where the key does not already say it and the variant
    (``torch:bf16``, ``torch+compile``)."""
    name = framework if precision == "fp32" or framework.endswith(precision) else f"{framework}:{precision}"
    return f"{name}+{variant}" if variant else name


def record_name(record: dict[str, Any]) -> str:
    return display_name(record["framework"], record.get("precision", "fp32"), record.get("variant", ""))


def verdict(a: str, a_ms: Sequence[float], b: str, b_ms: Sequence[float]) -> str:
    """"A is 2.4x the speed of B [95% CI 2.2-2.6x]" or "no significant difference", from raw latencies."""
    cmp = compare_medians(a_ms, b_ms)
    lo, hi = cmp["ci95"]
    if not cmp["significant"]:
        return f"{a} vs {b}: no significant difference (latency ratio {cmp['ratio']:.3f} [95% CI {lo:.3f}-{hi:.3f}])"
    return f"{a} is {1 / cmp['ratio']:.2f}x the speed of {b} [95% CI {1 / hi:.2f}-{1 / lo:.2f}x]"
