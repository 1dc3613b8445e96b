"""What every inferbench command line shares: one-line errors, writable-folder checks, the exit-status
wrapper. The options themselves are declared once, in :mod:`inferbench.options`."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from .. import __version__
from ..analysis.ranking import validity_of
from ..base.errors import UsageError, shorten
from ..base.text import Visible, visible
from .jsonout import write_document

#: The exit statuses of the commands that measure (``run``, ``sweep``), as --help and docs/cli.md say them.
MEASURING_EXITS = (
    "0  every cell ran, wrote its record and passed parity (or was shown apart, unjudged)",
    "1  a cell failed, or FAILED PARITY (its export computes something else than the model: a correctness "
    "regression for CI to stop on, named in the lines after the table, not a crash), a record could not be "
    "written, or --require-valid and the machine was busy",
    "2  bad input: one line, nothing written",
    "130, 143, 129  interrupted (Ctrl-C, SIGTERM, SIGHUP): the records already written are complete")


class Parser(argparse.ArgumentParser):
    """Every command's parser: ``--version``, examples and exit statuses after the options, errors as one line."""

    def __init__(self, *args: Any, examples: Sequence[str] = (), exits: Sequence[str] = (), **kwargs: Any) -> None:
        epilog = ["examples:", *(f"  {e}" for e in examples)] if examples else []
        epilog += ["", "exit status:", *(textwrap.fill(e, 100, initial_indent="  ", subsequent_indent="     ")
                                          for e in exits)] if exits else []
        if epilog:
            kwargs["epilog"] = "\n".join(epilog).strip("\n")
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action="version", version=f"inferbench {__version__}")

    def error(self, message: str) -> NoReturn:  # one line, not the usage block
        raise UsageError(f"{message} (see --help)")


def typed(prog: str) -> str:
    """A command as the user typed it, from its error prefix: ``inferbench run`` stays, ``inferbench.run``
    becomes ``python -m inferbench.run``."""
    return prog if " " in prog else f"python -m {prog}"


def say_skipped(skipped: dict[str, str], notes: Any = (), stream: Any = None) -> None:
    """One line for what 'all' left out here, and why (not installed: the command that installs it); then the plan's
    notes (--time-budget: what fits)."""
    if skipped:
        print("not run here: " + "; ".join(f"{k} ({why})" for k, why in skipped.items()),
              file=stream or sys.stderr)
    for line in notes:
        print(line, file=stream or sys.stderr)


def unmeasured_why(budget: bool, executor: str) -> str:
    """Why a run's cells were left unmeasured: --time-budget, or (on a cluster) jobs that ended early."""
    if executor == "local":
        return "by --time-budget"
    return "(by --time-budget, or their jobs ended early: said above)" if budget else \
        "(their jobs ended early: said above)"


def exit_status(executed: Any, require_valid: bool = False) -> int:
    """0 when every cell that ran wrote its record and none failed or failed parity (and, with ``require_valid``,
    the run is valid), else 1 (after one line per record that could not be written, and one when the run is not
    valid). Cells --time-budget left unmeasured are said by the caller and do not change it: they are to come
    (``--resume``), not failed."""
    for label, why in executed.unwritten.items():
        print(f"not written: {label}: {why}", file=sys.stderr)
    bad = [r for r in executed.records if r["status"] != "ok" or r["parity"]["status"] == "failed"]
    invalid = False
    if require_valid:
        verdict = validity_of(executed.records)
        invalid = verdict["valid"] is not True
        if invalid:
            print(f"--require-valid: the run is not valid ({verdict['not_valid']} of {verdict['cells']} cells): "
                  f"{verdict['reason']}", file=sys.stderr)
    return 1 if bad or executed.unwritten or invalid else 0


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled like Ctrl-C: workers stopped, temporary folders removed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Interrupted` in the main thread for as long as a command runs."""
    try:  # a signal the caller ignores (nohup: SIGHUP) stays ignored
        previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)
                    if signal.getsignal(s) is not signal.SIG_IGN}
    except ValueError:  # not the main thread (a test runner's worker thread): leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def guarded(prog: str, body: Callable[[list[str] | None], int], argv: list[str] | None,
            interrupted: str = "records already written are complete") -> int:
    """Run a command body: bad input is one line on stderr and exit 2; Ctrl-C, SIGTERM and SIGHUP are one
    line and 128 + the signal's number (130, 143, 129)."""
    try:
        with _signals_interrupt(), visible_streams():
            return body(argv)
    except UsageError as exc:
        return _error(prog, argv, 2, shorten(str(exc)))
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        print(f"{prog}: interrupted by {signal.Signals(signum).name}; {interrupted}", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:  # `inferbench list | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 0
    except OSError as exc:  # the machine, not the input: a full disk, a folder taken away; one line, exit 1
        where = f" ({exc.filename})" if exc.filename else ""
        return _error(prog, argv, 2 if exc.errno == errno.ENAMETOOLONG else 1,  # a name too long is the input's
                      shorten(f"{exc.strerror or exc}{where}"))


@contextlib.contextmanager
def visible_streams() -> Iterator[None]:
    """Standard output and error through the one sanitiser (:class:`inferbench.base.text.Visible`) while a command
    runs: no control or bidirectional-override character of a name, path, label or error reaches the terminal, a
    log or a --json document raw."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Visible(out), Visible(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


#: The commands that take --json (cli.jsonout): an error ends them with the error document.
JSON_COMMANDS = ("run", "compare", "report", "list")


def _error(prog: str, argv: list[str] | None, status: int, message: str) -> int:
    """One line on standard error; with --json, the same line as the error document on standard output (a script
    reading the document always gets one). Returns ``status``."""
    message = visible(message)
    print(f"{prog}: error: {message}", file=sys.stderr)
    command = prog.replace(".", " ").split()[-1]
    if command in JSON_COMMANDS and "--json" in (sys.argv[1:] if argv is None else argv):
        write_document(command, status, {"error": message})
    return status

