"""System checks for what the hot path needs of the database."""

from django.core.checks import Error, Tags, register
from django.db import connections


@register(Tags.database)
def database_returns_inserted_ids(databases=None, **kwargs):
    """``core.db.bulk_insert`` inserts a batch's rows with INSERT ... RETURNING (the stock service's hot path)."""
    return [
        Error(
            f"Database {alias!r} cannot return the ids of a multi-row INSERT.",
            hint="Use MariaDB 10.5 or later (or SQLite 3.35 or later): MySQL has no INSERT ... RETURNING.",
            id="core.E001",
        )
        for alias in databases or []
        if not connections[alias].features.can_return_rows_from_bulk_insert
    ]
