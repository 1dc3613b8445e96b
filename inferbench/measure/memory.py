"""Host memory of the current process."""

from __future__ import annotations

import resource
import sys


def peak_rss_mb() -> float:
    """High-water mark of this process's resident set size, in MiB: ``VmHWM`` on Linux (which
    ``clear_refs`` resets; ``ru_maxrss`` keeps the peak of exited threads and the exec), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def current_rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * resource.getpagesize() / (1024 * 1024)
    except OSError:  # pragma: no cover - not Linux
        return float("nan")
