"""inferbench: which runtime should serve this vision model, on this machine, and at what cost?

Importing this package imports no ML framework: each framework is imported only by the
runner or exporter that uses it, inside a child process.
"""

__version__ = "0.1.0"

#: Version of the JSON result record. History:
#:   1 — first release (issue 2): configuration, environment, parity, latency statistics,
#:       raw per-iteration latencies, cold start, host memory.
SCHEMA_VERSION = 1
