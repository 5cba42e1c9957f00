"""Base models shared by every domain model: timestamps and soft delete.

``QuerySet.update()`` skips ``auto_now``, so our querysets stamp ``updated_at`` themselves:
the inventory service's conditional UPDATEs keep the timestamp current too.
"""

from django.db import connections, models, router
from django.utils import timezone


class TimestampedQuerySet(models.QuerySet):
    def update(self, **kwargs):
        kwargs.setdefault("updated_at", timezone.now())
        return super().update(**kwargs)


class TimestampedModel(models.Model):
    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TimestampedQuerySet.as_manager()

    class Meta:
        abstract = True


class SoftDeleteQuerySet(TimestampedQuerySet):
    def delete(self):
        """Soft, also for the admin's bulk "delete selected" (it calls QuerySet.delete())."""
        return self.update(is_deleted=True, deleted_at=timezone.now())

    def hard_delete(self):
        return super().delete()

    def restore(self):
        return self.update(is_deleted=False, deleted_at=None)

    def alive(self):
        return self.filter(is_deleted=False)

    def deleted(self):
        return self.filter(is_deleted=True)


class SoftDeleteManager(models.Manager.from_queryset(SoftDeleteQuerySet)):
    """Hides deleted rows."""

    def get_queryset(self):
        return super().get_queryset().filter(is_deleted=False)


AllObjectsManager = models.Manager.from_queryset(SoftDeleteQuerySet)


class BaseModel(TimestampedModel):
    """Timestamps plus soft delete: ``delete()`` hides the row, ``hard_delete()`` removes it."""

    is_deleted = models.BooleanField(default=False, db_index=True, editable=False)
    deleted_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = SoftDeleteManager()
    all_objects = AllObjectsManager()

    class Meta:
        abstract = True
        default_manager_name = "objects"
        # Related lookups (an order line's product) must still reach soft-deleted rows.
        base_manager_name = "all_objects"

    def delete(self, using=None, keep_parents=False):
        self.is_deleted = True
        self.deleted_at = timezone.now()
        self.save(update_fields=["is_deleted", "deleted_at", "updated_at"])

    def hard_delete(self, using=None, keep_parents=False):
        return super().delete(using=using, keep_parents=keep_parents)

    def restore(self):
        self.is_deleted = False
        self.deleted_at = None
        self.save(update_fields=["is_deleted", "deleted_at", "updated_at"])


def bulk_insert(model: type[models.Model], rows: list[dict]) -> list[dict]:
    """Insert ``rows`` (attname: value) in one statement; return them with ``id`` and timestamps filled in.

    ``bulk_create`` builds and prepares a model instance per row: for a batch of queued orders on the
    hot path that costs more than the database does (see bench/reserve.py). Every row must name the
    same fields; soft-delete and timestamp columns get their defaults here. Build instances from the
    returned rows with ``from_row``. Uses INSERT ... RETURNING (MariaDB 10.5+, SQLite: ``shop.checks``).
    """
    if not rows:
        return []
    sql, params, rows = insert_returning(model, rows)
    [ids] = statements_run(router.db_for_write(model), [(sql, params)])
    return [row | {"id": pk} for row, (pk,) in zip(rows, ids, strict=True)]


def insert_returning(model: type[models.Model], rows: list[dict]) -> tuple[str, list, list[dict]]:
    """``bulk_insert``'s statement, for a caller that sends it with others (``statements_run``).

    Returns the SQL (an INSERT ... RETURNING id), its parameters and the rows with their defaults
    filled in; the statement's result rows are their ids, in order.
    """
    connection = connections[router.db_for_write(model)]
    now = timezone.now()
    defaults = {"created_at": now, "updated_at": now}
    if issubclass(model, BaseModel):
        defaults |= {"is_deleted": False, "deleted_at": None}
    rows = [defaults | row for row in rows]
    fields = [model._meta.get_field(name) for name in rows[0]]
    prepared = {}  # a batch shares its timestamps and prices: adapt each distinct one once

    def prepare(field, value):
        if value is None or isinstance(value, (bool, int, str)):
            return value
        key = (field.attname, value)
        if key not in prepared:
            prepared[key] = field.get_db_prep_save(value, connection)
        return prepared[key]

    quote = connection.ops.quote_name
    placeholder = f"({', '.join(['%s'] * len(fields))})"
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(field.column) for field in fields)}) "
        f"VALUES {', '.join([placeholder] * len(rows))} RETURNING {quote(model._meta.pk.column)}"
    )
    return sql, [prepare(field, row[field.attname]) for row in rows for field in fields], rows


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
    """A saved instance from a ``bulk_insert`` row (no query); fields the row lacks are deferred."""
    names = [field.attname for field in model._meta.concrete_fields if field.attname in row]
    return model.from_db(router.db_for_read(model), names, [row[name] for name in names])


def select_in(model: type[models.Model], columns: str, **values_in) -> list[tuple]:
    """Rows of ``SELECT columns FROM`` the model's table ``WHERE`` each named column is ``IN`` its values.

    Plain SQL for reads a lock holder makes once per batch: building such a query with the ORM cost
    4-5x the CPU of running it (bench/reserve.py). ``columns`` is SQL; the keywords are column names.
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
