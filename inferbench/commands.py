"""``inferbench COMMAND [options]``: the console script (and ``python -m inferbench``).

Each command is also its own module, so the command line of the scripts inferbench replaces keeps working as written:
``python -m inferbench.run --framework tfxla --gpu-id 0``.
"""

from __future__ import annotations

import importlib
import sys

from . import __version__
from .cli.common import Parser, guarded
from .cli.jsonout import emitted, json_mode
from .cli.options import add_options
from .run import list_everything

#: command -> (module, one line of help)
COMMANDS = {
    "run": ("inferbench.run", "export one model, verify every export, measure each runtime; the answer first"),
    "sweep": ("inferbench.sweep", "a grid of models x resolutions x batch sizes x frameworks, resumable"),
    "zoo": ("inferbench.zoo", "every registered model through every framework here, briefly: a support matrix"),
    "report": ("inferbench.report", "a report (HTML and Markdown, with figures) from result folders"),
    "compare": ("inferbench.compare", "per-cell ratios OLD -> NEW with intervals; exit 1 on a regression (CI)"),
    "history": ("inferbench.history", "results over time: every run kept in a database, steps found per series"),
    "list": ("inferbench.commands", "the registered models and frameworks, and what runs on this machine"),
    "selftest": ("inferbench.selftest", "a short check of every framework installed here, ending PASS or FAIL"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: inferbench COMMAND [options]   (inferbench COMMAND --help for its options)", "",
             "Which runtime should serve this vision model, on this machine, and what does it cost?", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    lines += ["", "examples:", "  inferbench run                      # the default model, each runtime at its best",
              "  inferbench compare OLD_DIR NEW_DIR --fail-above 10",
              "  inferbench report benchmark_results/ --out report"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0
    if args[0] == "--version":
        print(f"inferbench {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name.startswith("-"):  # `python -m inferbench --framework tf` ran the benchmark before commands
        print(f"inferbench: error: {name} is an option, not a command: did you mean "
              f"`inferbench run {' '.join(args)}`? (see inferbench --help)", file=sys.stderr)
        return 2
    if name not in COMMANDS:
        print(f"inferbench: error: unknown command {name!r}; choose from {', '.join(COMMANDS)} "
              "(see inferbench --help)", file=sys.stderr)
        return 2
    if name == "list":
        return list_main(rest)
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest, prog=f"inferbench {name}"))


def list_main(argv: list[str]) -> int:
    """``inferbench list``: the registered models and frameworks, and whether each runs here."""
    def body(args: list[str] | None) -> int:
        p = Parser(prog="inferbench list", description=COMMANDS["list"][1],
                   examples=["inferbench list", "inferbench list | grep torch", "inferbench list --json"])
        add_options(p, "list")
        ns = p.parse_args(args)
        return json_mode(getattr(ns, "json", False), "list", lambda emit: emitted(
            emit, list_everything(quiet=getattr(ns, "json", False))))

    return guarded("inferbench list", body, argv)
