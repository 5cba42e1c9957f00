"""Text compared byte for byte, whatever the column's collation.

MariaDB's ``utf8mb4_unicode_ci`` calls ``é`` and ``e`` (and ``ß`` and ``ss``) equal: right for searching,
wrong for an identity. An email that claims orders, signs up or logs in, and a buyer the limits per
customer count, are compared exactly, in their canonical spelling (``orders.customers``). SQLite compares
``BINARY`` by default, so there these are plain comparisons.
"""

from django.db import models

# The binary collation per database vendor; none: the vendor's default compares bytes already.
BINARY_COLLATIONS = {"mysql": "utf8mb4_bin"}


def binary_sql(column: str, *, vendor: str) -> str:
    """``column`` as a raw statement compares it exactly (its index still narrows, the collation decides)."""
    collation = BINARY_COLLATIONS.get(vendor)
    return f"{column} COLLATE {collation}" if collation else column


class Exact(models.Func):
    """An expression compared byte for byte: ``filter(email_exact=...)`` after ``alias(email_exact=Exact("email"))``."""

    template = "%(expressions)s"

    def as_sql(self, compiler, connection, **extra):
        collation = BINARY_COLLATIONS.get(connection.vendor)
        template = f"%(expressions)s COLLATE {collation}" if collation else self.template
        return super().as_sql(compiler, connection, template=template, **extra)


class ExactEmailField(models.EmailField):
    """An email column whose comparisons and UNIQUE index are byte for byte (``BINARY_COLLATIONS``)."""

    def db_parameters(self, connection):
        return {**super().db_parameters(connection), "collation": BINARY_COLLATIONS.get(connection.vendor)}
