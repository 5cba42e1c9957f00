"""Database helpers every app shares: plain-SQL inserts and reads for the hot path, and MySQL's error numbers.

The error numbers are named here and nowhere else; code asks ``is_duplicate_key``, ``connection_lost``
or ``retry_on_deadlock`` instead of comparing numbers itself.
"""

import datetime
import decimal
import functools
import logging
import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, NamedTuple, NoReturn

from django.core.exceptions import FieldDoesNotExist
from django.db import IntegrityError, InterfaceError, OperationalError, connections, models, router
from django.db.models import QuerySet
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

logger = logging.getLogger(__name__)

# The class attributes of fields whose value ``Model.__init__`` stores as given (``from_row``).
_PLAIN_ATTRIBUTES = (DeferredAttribute, ForeignKeyDeferredAttribute)

# MySQL/MariaDB server errors.
SERVER_SHUTDOWN = 1053  # the server is shutting down
DUPLICATE_KEY = 1062  # a unique key refused the row
LOCK_WAIT_TIMEOUT = 1205  # gave up waiting for a row lock
DEADLOCK = 1213  # chosen as a deadlock victim
CONNECTION_KILLED = 1927  # MariaDB: the connection was killed
CLIENT_INACTIVE = 4031  # the server disconnected a client idle past its timeout
# Client errors (mysqlclient).
CANNOT_CONNECT_LOCAL = 2002  # no server on the local socket
CANNOT_CONNECT = 2003  # no server at the host and port
SERVER_GONE = 2006  # the server closed the connection
LOST_CONNECTION = 2013  # the connection dropped during a query

# The connection is gone (server down or restarting, connection killed or timed out): the transaction
# was rolled back, so the request may be retried.
CONNECTION_LOST_ERRORS = frozenset(
    {
        SERVER_SHUTDOWN,
        CONNECTION_KILLED,
        CLIENT_INACTIVE,
        CANNOT_CONNECT_LOCAL,
        CANNOT_CONNECT,
        SERVER_GONE,
        LOST_CONNECTION,
    }
)
# The transaction is lost whole (the database rolls back a deadlock victim; after a lock wait timeout the
# caller's atomic block rolls back), so running it again is safe.
RETRYABLE_ERRORS = frozenset({DEADLOCK, LOCK_WAIT_TIMEOUT})


def _error_number(exc: BaseException | None) -> int | None:
    """The MySQL/MariaDB error number a database error carries, if any."""
    args = getattr(exc, "args", None)
    return args[0] if args and isinstance(args[0], int) else None


def is_duplicate_key(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a unique key refusing a row."""
    return isinstance(exc, IntegrityError) and _error_number(exc) == DUPLICATE_KEY


def connection_lost(exc: BaseException | None) -> bool:
    """Whether ``exc`` means the database connection is gone (the transaction rolled back: retry)."""
    if isinstance(exc, InterfaceError):
        return True
    return isinstance(exc, OperationalError) and _error_number(exc) in CONNECTION_LOST_ERRORS


def retry_on_deadlock(func, *, attempts: int = 3):
    """Run ``func`` (which opens its own transaction) again if it was a deadlock victim or timed out on a row lock."""
    for attempt in range(1, attempts + 1):
        try:
            return func()
        except OperationalError as exc:
            if _error_number(exc) not in RETRYABLE_ERRORS or attempt == attempts:
                raise
            logger.warning("database error %s on attempt %d of %d; retrying", exc.args[0], attempt, attempts)
            time.sleep(0.05 * attempt)


class MissingColumns(TypeError):
    """Rows for ``bulk_insert`` leave out fields that have no default: a programming error, raised before any SQL."""

    def __init__(self, model: type[models.Model], fields: list[str], row: int):
        self.model, self.fields, self.row = model, fields, row
        super().__init__(
            f"{model._meta.label} rows leave out fields without a default: {', '.join(fields)} (row {row});"
            " give them in every row"
        )


class _Columns(NamedTuple):
    """How ``insert_returning`` fills one model's rows: worked out once per model (``_columns``)."""

    fields: tuple[models.Field, ...]  # every column the INSERT names, in the model's order
    fixed: MappingProxyType  # attname: what a row that leaves it out gets, the same for every row
    stamped: tuple[str, ...]  # attnames a row that leaves them out gets the statement's time in
    per_row: tuple[tuple[str, Callable[[], Any]], ...]  # attname, its callable default: called per row


@functools.cache
def _columns(model: type[models.Model]) -> _Columns:
    """A field with none of these defaults must be in every row (so must one with only a ``db_default``:
    the INSERT names every column)."""
    fields, fixed, stamped, per_row = [], {}, [], []
    for field in model._meta.concrete_fields:
        if field.db_returning or getattr(field, "generated", False):
            continue  # the auto-increment id (RETURNING gives it), or a column the database computes
        fields.append(field)
        if isinstance(field, models.DateTimeField) and (
            field.auto_now or field.auto_now_add or field.default is timezone.now
        ):
            stamped.append(field.attname)
        elif isinstance(field, models.DateField) and (field.auto_now or field.auto_now_add):
            per_row.append((field.attname, datetime.date.today))  # as the model's save() does
        elif field.has_default():
            if callable(field.default):
                per_row.append((field.attname, field.get_default))
            else:
                fixed[field.attname] = field.get_default()
        elif field.null:
            fixed[field.attname] = None
        elif field.blank and field.empty_strings_allowed:
            fixed[field.attname] = ""
    return _Columns(tuple(fields), MappingProxyType(fixed), tuple(stamped), tuple(per_row))


def insert_defaults(model: type[models.Model]) -> MappingProxyType:
    """What ``bulk_insert`` gives the fields a row leaves out, for those whose value is the same for every row.

    For rebuilding an inserted row elsewhere without a query (a queued buyer rebuilds what its lock
    holder inserted): ``from_row(model, insert_defaults(model) | row | {"id": ...})``. Timestamps and
    callable defaults are not in it: take them from the inserted row.
    """
    return _columns(model).fixed


def bulk_insert(model: type[models.Model], rows: list[dict]) -> list[dict]:
    """Insert ``rows`` (attname: value) in one statement; return them as stored, with ``id`` and defaults.

    ``bulk_create`` builds and prepares a model instance per row: for a batch of queued orders on the
    hot path that costs more than the database does (see bench/reserve.py). Like ``bulk_create``, it
    fills the fields a row leaves out (``insert_returning`` says how), so a row gives only what its
    caller decides. Build instances from the returned rows with ``from_row``. Uses INSERT ... RETURNING
    (MariaDB 10.5+, SQLite: ``core.checks``).
    """
    if not rows:
        return []
    sql, params, rows = insert_returning(model, rows)
    [ids] = statements_run(router.db_for_write(model), [(sql, params)])
    return [row | {"id": pk} for row, (pk,) in zip(rows, ids, strict=True)]


def insert_returning(model: type[models.Model], rows: list[dict]) -> tuple[str, list, list[dict]]:
    """``bulk_insert``'s statement, for a caller that sends it with others (``statements_run``).

    Returns the SQL (an INSERT of every column but the id, RETURNING the id), its parameters and the
    rows with their defaults filled in; the statement's result rows are their ids, in order.

    A field a row leaves out gets its default (``get_default()``; a callable one is called per row),
    or None if it may be null, or "" if it is text that may be blank. Timestamps (``auto_now``,
    ``auto_now_add``, ``default=timezone.now``) are the statement's one instant, so rows inserted
    together share them. A row's own value always wins. A field that has none of these must be in
    every row: ``MissingColumns`` names what a row leaves out, before any SQL; a name that is no
    column is ``FieldDoesNotExist``.
    """
    columns = _columns(model)
    fields = columns.fields
    base = columns.fixed | dict.fromkeys(columns.stamped, timezone.now())
    filled = [base | row for row in rows]
    for attname, make in columns.per_row:
        for row in filled:
            if attname not in row:
                row[attname] = make()
    if any(len(row) != len(fields) for row in filled):
        _refuse(model, columns, filled)
    connection = connections[router.db_for_write(model)]
    prepared = {}  # a batch shares its timestamps and prices: adapt each distinct one once

    def prepare(field, value):
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, (dict, list)):  # JSON: unhashable, and rarely shared
            return field.get_db_prep_save(value, connection)
        key = (field.attname, value)
        if key not in prepared:
            prepared[key] = field.get_db_prep_save(value, connection)
        return prepared[key]

    try:
        params = [prepare(field, row[field.attname]) for row in filled for field in fields]
    except KeyError:  # a row left a field out and named one that is no column
        _refuse(model, columns, filled)
    into, placeholder, returning = _insert_sql(model, connection.alias)
    return f"{into}{', '.join([placeholder] * len(filled))}{returning}", params, filled


@functools.cache
def _insert_sql(model: type[models.Model], alias: str) -> tuple[str, str, str]:
    """``insert_returning``'s SQL around its rows, quoted once per model: INSERT ... VALUES, a row's
    placeholder, RETURNING."""
    quote = connections[alias].ops.quote_name
    fields = _columns(model).fields
    return (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(field.column) for field in fields)}) VALUES ",
        f"({', '.join(['%s'] * len(fields))})",
        f" RETURNING {quote(model._meta.pk.column)}",
    )


def _refuse(model: type[models.Model], columns: _Columns, rows: list[dict]) -> NoReturn:
    """Raise for the first row that leaves out a field that has no default, or names no column."""
    names = [field.attname for field in columns.fields]
    for index, row in enumerate(rows):
        if missing := [name for name in names if name not in row]:
            raise MissingColumns(model, missing, index)
        if unknown := sorted(row.keys() - set(names)):
            raise FieldDoesNotExist(f"{model._meta.label} has no column for {', '.join(unknown)} (row {index})")
    raise AssertionError("every row names every column")


def statements_run(using: str, statements: list[tuple[str, list]]) -> list:
    """Run ``statements`` (SQL, parameters) in order: per statement its rows, or if it returns none its row count.

    On MySQL/MariaDB they go in one round trip (multi-statements, enabled by ``config.mysql``): a lock
    holder's batch is a chain of statements every queued buyer waits for, and on busy cores each
    round trip costs two wake-ups. An error stops the ones after it and is raised. Elsewhere they run
    one by one.
    """
    connection = connections[using]
    results = []
    with connection.cursor() as cursor:
        if getattr(connection.features, "can_send_statements_together", False):
            cursor.execute("; ".join(sql for sql, _ in statements), [p for _, params in statements for p in params])
            while True:
                results.append(cursor.fetchall() if cursor.description else cursor.rowcount)
                if not cursor.nextset():
                    return results
        for sql, params in statements:
            cursor.execute(sql, params)
            results.append(cursor.fetchall() if cursor.description else cursor.rowcount)
    return results


def from_row(model: type[models.Model], row: dict) -> models.Model:
    """A saved instance from a ``bulk_insert`` row (no query); fields the row lacks are deferred.

    The instance ``Model.from_db`` would build. A queued buyer builds its order, lines and products
    this way on the hot path, where ``Model.__init__``'s call per field is most of what building its
    answer costs: so when nothing can tell the difference (no init signal receivers, plain field
    attributes) the fields go straight into the instance's ``__dict__``, as ``__init__`` puts them.
    """
    attnames, plain = _row_attnames(model)
    db = router.db_for_read(model)
    if not plain or pre_init.has_listeners(model) or post_init.has_listeners(model):
        names = [name for name in attnames if name in row]
        return model.from_db(db, names, [row[name] for name in names])
    instance = model.__new__(model)
    instance._state = ModelState()
    instance._state.adding, instance._state.db = False, db
    instance.__dict__.update({name: row[name] for name in attnames if name in row})
    return instance


@functools.cache
def _row_attnames(model: type[models.Model]) -> tuple[tuple[str, ...], bool]:
    """The model's column attnames, and whether each is a plain attribute (no descriptor that converts
    what is set, as a file or country field has)."""
    attnames = tuple(field.attname for field in model._meta.concrete_fields)
    plain = all(type(model.__dict__.get(name)) in _PLAIN_ATTRIBUTES for name in attnames)
    return attnames, plain


def prefetched_set(instance: models.Model, related_name: str, objects: list[models.Model]) -> models.Model:
    """``instance`` with ``objects`` as its prefetched ``related_name`` set, as ``prefetch_related`` leaves it.

    For objects already at hand (just inserted): ``instance.<related_name>.all()`` and a later
    ``prefetch_related_objects`` then read them without a query. The set is a bare queryset of the
    related model (building the related manager's filtered one costs more than the objects).
    """
    related = QuerySet(model=getattr(type(instance), related_name).rel.related_model)
    related._result_cache, related._prefetch_done = list(objects), True
    if not hasattr(instance, "_prefetched_objects_cache"):
        instance._prefetched_objects_cache = {}
    instance._prefetched_objects_cache[related_name] = related
    return instance


_SQLITE_DIGITS = decimal.Context(prec=15)  # SQLite keeps a REAL's 15 significant digits, no more


def decimal_from_db(field: models.DecimalField, value) -> decimal.Decimal | None:
    """A decimal column's value read by plain SQL, as the ORM gives it: a ``Decimal`` of the field's places.

    MariaDB hands back a ``Decimal``; SQLite a float (9.90 comes back as 9.9000000000000003552...), which
    must not reach a price: it would equal no stored amount. Every plain-SQL read of a money or rate
    column goes through here, as Django's own SQLite converter does for the ORM's reads.
    """
    if value is None:
        return None
    exact = _SQLITE_DIGITS.create_decimal_from_float(value) if isinstance(value, float) else decimal.Decimal(value)
    return exact.quantize(decimal.Decimal(1).scaleb(-field.decimal_places), context=field.context)


def select_in(model: type[models.Model], columns: str, **values_in) -> list[tuple]:
    """Rows of ``SELECT columns FROM`` the model's table ``WHERE`` each named column is ``IN`` its values.

    Plain SQL for reads a lock holder makes once per batch: building such a query with the ORM costs
    more CPU than running it (bench/reserve.py). ``columns`` is SQL; the keywords are column names.
    """
    [rows] = statements_run(router.db_for_read(model), [select_in_statement(model, columns, **values_in)])
    return rows


def select_in_statement(model: type[models.Model], columns: str, **values_in) -> tuple[str, list]:
    """``select_in``'s statement and parameters, for a caller that sends it with others (``statements_run``)."""
    quote = connections[router.db_for_read(model)].ops.quote_name
    where = " AND ".join(
        f"{quote(column)} IN ({', '.join(['%s'] * len(values))})" for column, values in values_in.items()
    )
    sql = f"SELECT {columns} FROM {quote(model._meta.db_table)} WHERE {where}"
    return sql, [value for values in values_in.values() for value in values]


def delete_in_batches(queryset: QuerySet, *, batch_size: int = 5000) -> int:
    """Delete the queryset's rows for good (a soft-deletable model's too), ``batch_size`` at a time.

    Each batch is its own short statement, so pruning a table never holds its locks for long; the
    rows are picked by primary key, so each DELETE finds them by the primary index. The count deleted.
    """
    model, deleted = queryset.model, 0
    for _ in range(10**6):  # bounded: a million batches
        pks = list(queryset.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not pks:
            break
        count, _ = models.QuerySet(model).filter(pk__in=pks).delete()  # a plain QuerySet: never a soft delete
        deleted += count
    return deleted
