"""The history store: one table of rows (:mod:`inferbench.timeline.rows`) in an embedded DuckDB file, or in a team's
PostgreSQL (``postgresql://...``, through psycopg) by the same SQL. Each row is added once, by its record's content
digest; a store made by an older inferbench gains the columns it lacks. Every failure is one line
(:class:`~inferbench.base.errors.UsageError`): a file that is no DuckDB database, a store another process holds,
a server that cannot be reached."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..base.errors import UsageError
from .rows import COLUMNS, CONFIRMATIONS

TABLE = "records"
#: table -> its columns (the first one its primary key)
TABLES = {TABLE: COLUMNS, "confirmations": CONFIRMATIONS}
#: The default store, beside the default results: ``inferbench-results/history.duckdb``.
DEFAULT = Path("inferbench-results") / "history.duckdb"
LOCK_WAIT_S = 10.0  # another inferbench adding its records to the same DuckDB file: wait this long, then say so


def is_server(where: str) -> bool:
    return where.startswith(("postgresql://", "postgres://"))


class Store:
    """An open store: :meth:`add` rows, :meth:`rows` back (as dicts, oldest first)."""

    def __init__(self, where: str) -> None:
        self.where, self.server = where, is_server(where)
        self.said = shown(where)  # a password never printed
        self.mark = "%s" if self.server else "?"
        self.conn = _connect_server(where) if self.server else _connect_file(Path(where))
        self._schema()

    def _schema(self) -> None:
        for table, columns in TABLES.items():
            self._run(f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(f'{n} {k}' for n, k in columns.items())})")
            have = {r[0] for r in self._fetch("SELECT column_name FROM information_schema.columns WHERE "
                                              f"table_name = {self.mark}", (table,))}
            for name, kind in columns.items():  # a store an older inferbench made: the columns it lacks, empty
                if name not in have:
                    self._run(f"ALTER TABLE {table} ADD COLUMN {name} {kind.replace(' PRIMARY KEY', '')}")
        self._commit()

    def add(self, rows: Iterable[dict[str, Any]], table: str = TABLE) -> int:
        """Add ``rows`` to ``table`` (each once: a row whose key is already stored is left as it is); how many were
        new."""
        names = list(TABLES[table])
        rows = list({r[names[0]]: r for r in rows}.values())  # a row given twice is one row
        if not rows:
            return 0
        before = self.count(table)
        into = f"INSERT INTO {table} ({', '.join(names)})"
        if self.server:
            sql = f"{into} VALUES ({', '.join(['%s'] * len(names))}) ON CONFLICT ({names[0]}) DO NOTHING"
            self._guard(lambda: self.conn.cursor().executemany(sql, [tuple(r.get(n) for n in names) for r in rows]))
        else:  # DuckDB reads a data frame whole: a thousand rows in a moment, where one INSERT a row takes seconds
            import pandas as pd

            self.conn.register("incoming", pd.DataFrame([{n: r.get(n) for n in names} for r in rows], columns=names))
            self._run(f"{into} SELECT {', '.join(names)} FROM incoming ON CONFLICT ({names[0]}) DO NOTHING")
            self.conn.unregister("incoming")
        self._commit()
        return self.count(table) - before

    def count(self, table: str = TABLE) -> int:
        return int(self._fetch(f"SELECT count(*) FROM {table}")[0][0])

    def rows(self, where: str = "", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Every stored record's row (``where``: an SQL condition with this store's placeholders), oldest first."""
        sql = f"SELECT {', '.join(COLUMNS)} FROM {TABLE} {'WHERE ' + where if where else ''} " \
              "ORDER BY created_at, run_id, record_id"
        return [dict(zip(COLUMNS, r)) for r in self._fetch(sql, params)]

    def confirmations(self) -> dict[str, dict[str, Any]]:
        """Each confirmed step's latest confirmation, by step id."""
        got = self._fetch(f"SELECT {', '.join(CONFIRMATIONS)} FROM confirmations ORDER BY confirmed_at")
        return {r["step_id"]: r for r in (dict(zip(CONFIRMATIONS, x)) for x in got)}

    def close(self) -> None:
        self.conn.close()

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self._guard(lambda: self.conn.execute(sql, params))

    def _fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self._guard(lambda: self.conn.execute(sql, params).fetchall()))

    def _commit(self) -> None:
        if self.server:
            self._guard(self.conn.commit)

    def _guard(self, call: Any) -> Any:
        try:
            return call()
        except Exception as exc:  # the database's own errors: one line naming the store
            if self.server:
                self.conn.rollback()
            raise UsageError(f"history store {self.said}: {_first_line(exc)}") from None


@contextmanager
def opened(where: str | Path) -> Iterator[Store]:
    """The store at ``where`` (a DuckDB file, made with its folder if missing; or a PostgreSQL URL), closed after."""
    store = Store(str(where))
    try:
        yield store
    finally:
        store.close()


def _connect_file(path: Path) -> Any:
    import duckdb  # imported here: `import inferbench` imports no database

    if path.exists() and not path.is_file():
        raise UsageError(f"history store {path}: not a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            return duckdb.connect(str(path))
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise UsageError(f"history store {path}: {_first_line(exc)}") from None
            time.sleep(0.2)  # another inferbench is adding its records: they take a moment
        except duckdb.Error as exc:  # not a DuckDB file, or one a newer DuckDB wrote
            raise UsageError(f"history store {path}: {_first_line(exc)} (--history PATH names another, "
                             "--history off keeps none)") from None


def _connect_server(url: str) -> Any:
    try:
        import psycopg
    except ImportError:
        raise UsageError("a PostgreSQL history needs psycopg: pip install -e \".[postgres]\"") from None
    try:
        return psycopg.connect(url, connect_timeout=10)
    except psycopg.Error as exc:
        raise UsageError(f"history store {shown(url)}: {_first_line(exc)}") from None


def shown(where: str) -> str:
    """A store's location as it may be printed: a URL without its password."""
    head, at, tail = where.rpartition("@")
    if not (at and is_server(where)):
        return where
    scheme, _, user = head.partition("://")
    return f"{scheme}://{user.partition(':')[0]}:***@{tail}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
