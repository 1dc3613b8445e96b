"""Result records: the :class:`~inferbench.records.record.Record` type, its schema history and upgraders
(:mod:`.record`), the one column table every summary and CSV is made from (:mod:`.table`), and loading folders of
records into one table for the analysis (:mod:`.load`). The names most callers need are here.
"""

from .load import iter_records, load, tidy
from .record import (
    SCHEMA_FILE,
    SUPPORTED_SCHEMAS,
    ImpossibleRecord,
    Record,
    as_written,
    not_run,
    parse,
    record_key,
    upgrade,
    write_record,
)
from .table import SUMMARY_COLUMNS, csv_cell, display_name, field, record_name, summary_row, write_csv

__all__ = ["SCHEMA_FILE", "SUMMARY_COLUMNS", "SUPPORTED_SCHEMAS", "ImpossibleRecord", "Record", "as_written",
           "csv_cell", "display_name", "field", "iter_records", "load", "not_run", "parse", "record_key",
           "record_name", "summary_row", "tidy", "upgrade", "write_csv", "write_record"]
