"""Loading the history's rows: each table's as one LOAD DATA text, a chunk per transaction, on writer
connections of their own while the next chunk is built."""

import os
import queue
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import NamedTuple

from django.core.exceptions import FieldDoesNotExist
from django.db import connection, models
from django.db.models import Max

from core.db import MissingColumns, insert_defaults
from demo.history.text import field_text

WRITERS = 2  # chunks loaded at once, each by a connection of its own: the server parses on as many cores


class HistoryLoadRefused(Exception):
    """The server skipped or altered rows of a chunk (the chunk is rolled back), or takes no local files."""


@contextmanager
def unique_deferred(model: type[models.Model], name: str) -> Iterator[None]:
    """Without the unique constraint ``name`` while the rows load, then with it again, built from them.

    The idempotency keys' hashes are random, so each new order would cost the load a read of an index
    page once that index outgrows the server's memory; built at the end, the index is one sorted pass.
    A run killed outright leaves it out until the next run ends.
    """
    constraint = next(constraint for constraint in model._meta.constraints if constraint.name == name)
    with connection.cursor() as cursor:
        present = name in connection.introspection.get_constraints(cursor, model._meta.db_table)
    if present:
        with connection.schema_editor() as editor:
            editor.remove_constraint(model, constraint)
    try:
        yield
    finally:
        with connection.schema_editor() as editor:
            editor.add_constraint(model, constraint)


class Load(NamedTuple):
    """One table's rows of a chunk: the LOAD DATA statement (its file a parameter), the text, how many rows."""

    table: str
    sql: str
    text: str
    rows: int


class _Loader(NamedTuple):
    """A writer's connection, with local files allowed and no foreign keys checked, and its file."""

    connection: object  # the driver's connection
    path: str


def chunks_load(chunks: Iterator[tuple[list[Load], int]], *, progress: Callable[[int], None]) -> int:
    """Load each chunk in a transaction of its own, ``WRITERS`` at a time, while the next is built; how many
    rows were loaded. The first failure stops it and is raised; chunks not yet begun are dropped."""
    rows, pending, loaders = 0, deque(), queue.SimpleQueue()

    def load(loads: list[Load]) -> None:
        loader = loaders.get()
        try:
            _chunk_load(loader, loads)
        finally:
            loaders.put(loader)

    def settle(keep: int) -> None:
        """Wait for the oldest chunks until ``keep`` are under way (so at most that many more are in memory)."""
        nonlocal rows
        while len(pending) > keep:
            future, orders, count = pending.popleft()
            future.result()
            rows += count
            progress(orders)

    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as directory:
        try:
            for number in range(WRITERS):
                loaders.put(_Loader(_loader_connect(), os.path.join(directory, f"rows{number}.tsv")))
            with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="seed_history") as writers:
                try:
                    for loads, orders in chunks:
                        pending.append((writers.submit(load, loads), orders, sum(part.rows for part in loads)))
                        settle(WRITERS)
                    settle(0)
                finally:
                    for future, _, _ in pending:
                        future.cancel()
        finally:
            while not loaders.empty():
                loaders.get().connection.close()
    return rows


def _loader_connect():
    """A connection as Django's, that may load local files; it checks no foreign keys."""
    loader = connection.get_new_connection(connection.get_connection_params() | {"local_infile": 1})
    loader.autocommit(False)
    cursor = loader.cursor()
    cursor.execute("SET SESSION foreign_key_checks = 0")
    cursor.close()
    return loader


def _chunk_load(loader: _Loader, loads: list[Load]) -> None:
    """Load a chunk's tables in one transaction; any row skipped or altered rolls it back and is raised."""
    cursor = loader.connection.cursor()
    try:
        for load in loads:
            with open(loader.path, "w", encoding="utf-8") as file:
                file.write(load.text)
            cursor.execute(load.sql, [loader.path])
            if (loaded := cursor.rowcount) != load.rows or loader.connection.warning_count():
                cursor.execute("SHOW WARNINGS LIMIT 5")
                raise HistoryLoadRefused(f"{load.table}: {load.rows} rows sent, {loaded} loaded, {cursor.fetchall()}")
        loader.connection.commit()
    except BaseException:
        loader.connection.rollback()
        raise
    finally:
        cursor.close()


class Table:
    """One model's rows as LOAD DATA's text. A row gives ``columns``, in this order: its text is its values
    joined by tabs, then ``tail``, which gives every other column ``fixed``'s value or the field's default,
    as ``core.db.bulk_insert`` fills it. ``numbered``: the rows' ids are given here, in the order gathered."""

    def __init__(self, model: type[models.Model], columns: tuple[str, ...], fixed: dict | None = None, numbered=False):
        fields = {field.attname: field for field in model._meta.concrete_fields}
        fixed = dict(insert_defaults(model)) | (fixed or {})
        if numbered:
            columns = (model._meta.pk.attname, *columns)
        if unknown := [name for name in [*columns, *fixed] if name not in fields]:
            raise FieldDoesNotExist(f"{model._meta.label} has no column for {', '.join(unknown)}")
        rest = [field for name, field in fields.items() if name not in columns]
        if missing := [field.attname for field in rest if field.attname not in fixed]:
            raise MissingColumns(model, missing, 0)
        quote = connection.ops.quote_name
        names = ", ".join(quote(field.column) for field in [*(fields[name] for name in columns), *rest])
        self.table = model._meta.db_table
        self.sql = f"LOAD DATA LOCAL INFILE %s INTO TABLE {quote(self.table)} CHARACTER SET utf8mb4 ({names})"
        values = [field_text(field.get_db_prep_save(fixed[field.attname], connection)) for field in rest]
        self.tail = "".join(f"\t{value}" for value in values) + "\n"
        self.next_id = new_id(model) if numbered else None
        self.rows: list[str] = []

    def load(self) -> Load:
        """The rows gathered, which are then let go."""
        rows, self.rows = self.rows, []
        if self.next_id is not None:
            start, self.next_id = self.next_id, self.next_id + len(rows)
            rows = [f"{pk}\t{row}" for pk, row in enumerate(rows, start)]
        return Load(self.table, self.sql, "".join(rows), len(rows))


def new_id(model: type[models.Model]) -> int:
    return (model._base_manager.aggregate(top=Max("pk"))["top"] or 0) + 1
