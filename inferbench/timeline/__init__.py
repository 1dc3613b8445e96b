"""Results over time: every run kept in a database (DuckDB, or PostgreSQL), series per cell and machine, steps
found by change-point detection (docs/history.md)."""
