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
    returned rows with ``from_row``. Uses INSERT ... RETURNING (MariaDB); elsewhere one INSERT per row.
    """
    if not rows:
        return []
    connection = connections[router.db_for_write(model)]
    now = timezone.now()
    defaults = {"created_at": now, "updated_at": now}
    if issubclass(model, BaseModel):
        defaults |= {"is_deleted": False, "deleted_at": None}
    rows = [defaults | row for row in rows]
    fields = [model._meta.get_field(name) for name in rows[0]]
    quote = connection.ops.quote_name
    table, columns = quote(model._meta.db_table), ", ".join(quote(field.column) for field in fields)
    placeholder = f"({', '.join(['%s'] * len(fields))})"
    prepared = {}  # a batch shares its timestamps and prices: adapt each distinct one once

    def prepare(field, value):
        if value is None or isinstance(value, (bool, int, str)):
            return value
        key = (field.attname, value)
        if key not in prepared:
            prepared[key] = field.get_db_prep_save(value, connection)
        return prepared[key]

    params = [[prepare(field, row[field.attname]) for field in fields] for row in rows]
    with connection.cursor() as cursor:
        if connection.features.can_return_rows_from_bulk_insert:
            values = ", ".join([placeholder] * len(rows))
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES {values} RETURNING {quote(model._meta.pk.column)}",
                [value for row in params for value in row],
            )
            ids = [row[0] for row in cursor.fetchall()]
        else:
            ids = []
            for row in params:
                cursor.execute(f"INSERT INTO {table} ({columns}) VALUES {placeholder}", row)
                ids.append(cursor.lastrowid)
    return [row | {"id": pk} for row, pk in zip(rows, ids, strict=True)]


def from_row(model: type[models.Model], row: dict) -> models.Model:
    """A saved instance from a ``bulk_insert`` row (no query); fields the row lacks are deferred."""
    names = [field.attname for field in model._meta.concrete_fields if field.attname in row]
    return model.from_db(router.db_for_read(model), names, [row[name] for name in names])


def select_in(model: type[models.Model], columns: str, **values_in) -> list[tuple]:
    """Rows of ``SELECT columns FROM`` the model's table ``WHERE`` each named column is ``IN`` its values.

    Plain SQL for reads a lock holder makes once per batch: building such a query with the ORM cost
    4-5x the CPU of running it (bench/reserve.py). ``columns`` is SQL; the keywords are column names.
    """
    connection = connections[router.db_for_read(model)]
    quote = connection.ops.quote_name
    where = " AND ".join(
        f"{quote(column)} IN ({', '.join(['%s'] * len(values))})" for column, values in values_in.items()
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {quote(model._meta.db_table)} WHERE {where}",
            [value for values in values_in.values() for value in values],
        )
        return cursor.fetchall()
