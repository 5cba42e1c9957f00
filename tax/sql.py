"""The tax rates' statement in plain SQL, named: it rides in a lock holder's first round trip, where the
ORM's compiling would cost more than the database's answer."""

from django.db import connection

from tax.models import TaxRate


def tax_rates_statement(*, countries) -> tuple[str, list]:
    """The live rates of ``countries`` (at least one), for ``statements_run``; rows go to
    ``tax.selectors.tax_rates_from_rows``."""
    countries = sorted(set(countries))
    quote = connection.ops.quote_name
    sql = (
        f"SELECT country, tax_class_id, rate FROM {quote(TaxRate._meta.db_table)} "
        f"WHERE NOT is_deleted AND country IN ({', '.join(['%s'] * len(countries))}) ORDER BY id"
    )
    return sql, countries
