"""``--json`` (run, compare, report, list): one JSON document on standard output for a script to read, everything
meant for people on standard error. The documents are described by ``inferbench/records/schema/output.schema.json``
(one definition per command) and carry ``command``, ``inferbench_version`` and ``exit_status``."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import __version__
from ..base.codec import plain
from ..records.table import busy, field, record_name, roofs, stability_word
from ..spec import record_filename

#: Where the documents' JSON Schema is (documented in docs/cli.md).
SCHEMA = Path(__file__).resolve().parent.parent / "records" / "schema" / "output.schema.json"

Emit = Callable[[dict[str, Any]], None]


def emitted(emit: Emit, document: Any) -> int:
    """``document`` emitted as the command's answer; exit status 0."""
    emit(document)
    return 0


def json_mode(enabled: bool, command: str, body: Callable[[Emit], int]) -> int:
    """Run ``body(emit)``; with ``enabled``, what it prints goes to standard error and the document it emitted (the
    last one) to standard output, with the exit status. A command that ends in one error line (bad input, exit 2;
    the machine, exit 1) prints the error document instead (:func:`inferbench.cli.common.guarded`)."""
    if not enabled:
        return body(lambda doc: None)
    out, docs = sys.stdout, list[Any]()
    with contextlib.redirect_stdout(sys.stderr):
        status = body(docs.append)
    if docs:
        write_document(command, status, docs[-1], out)
    return status


def write_document(command: str, status: int, body: dict[str, Any], out: Any = None) -> None:
    """The one document on standard output (``out``): ``command``, ``inferbench_version``, ``exit_status``, then
    ``body``."""
    out = out or sys.stdout
    doc = {"command": command, "inferbench_version": __version__, "exit_status": status, **body}
    out.write(json.dumps(plain(doc), indent=1, allow_nan=False) + "\n")
    out.flush()


def cell_summary(record: dict[str, Any], recs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A record as the ``run`` document lists it: its identity, verdicts and headline numbers (a busy cell's without
    intervals or stability: the record itself, with every field, is the file it names), and for a reduced precision
    its entry against its own FP32 from ``recs`` (the run's recommendations' ``reduced``)."""
    unjudged = busy(record)
    name = record_filename(record["model"], record["resolution"], record["batch_size"], record["framework"],
                           record.get("precision") or "fp32", record.get("variant") or "",
                           record.get("scenario") or "inference")
    return {"file": name, "model": record["model"], "resolution": record["resolution"],
            "batch_size": record["batch_size"], "framework": record["framework"],
            "precision": record.get("precision"), "variant": record.get("variant") or "",
            "scenario": record.get("scenario") or "inference", "status": record["status"],
            "error": record.get("error"), "parity": field(record, "parity.status"),
            "valid": field(record, "validity.valid"),
            "p50_ms": field(record, "latency_ms.p50"), "p50_ci95": None if unjudged else field(
                record, "latency_ms.p50_ci95"),
            "p99_ms": field(record, "latency_ms.p99"), "p99_ci95": None if unjudged else field(
                record, "latency_ms.p99_ci95"),
            "throughput_per_s": record.get("throughput_per_s"), "stability": stability_word(record),
            "energy_j_per_inference": field(record, "energy.joules_per_inference"),
            "roofs": roofs(record),
            "vs_fp32": next((c for rec in recs or [] if all(rec.get(k) == record.get(k) for k in (
                "model", "resolution", "batch_size")) for c in rec.get("reduced") or []
                if c["cell"] == record_name(record)), None)}
