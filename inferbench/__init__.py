"""inferbench: which runtime should serve this vision model, on this machine, and at what cost?

Importing this package imports no ML framework: each framework is imported only by the
runner or exporter that uses it, inside a child process.
"""

__version__ = "0.1.0"

#: Version of the JSON result record; the history and the upgrader are in ``inferbench.records.record``.
SCHEMA_VERSION = 9
