"""Tax rates, read by ``tax.sql``'s statement, which a lock holder sends with its batch's reads."""

from decimal import Decimal

from core.db import decimal_from_db
from tax.models import TaxRate


class TaxRates:
    """Rates in percent by (country, tax class id); a class without its own rate in a country pays the
    country's default, and a country without a default is not taxed."""

    def __init__(self, rates: dict[tuple[str, int | None], Decimal]):
        self._rates = rates

    def rate(self, *, country: str, tax_class_id: int | None) -> Decimal:
        if tax_class_id is not None and (country, tax_class_id) in self._rates:
            return self._rates[country, tax_class_id]
        return self._rates.get((country, None), Decimal(0))


def tax_rates_from_rows(rows) -> TaxRates:
    """``tax_rates_statement``'s rows; of two live defaults of one country (clean() forbids them), the first."""
    rates: dict[tuple[str, int | None], Decimal] = {}
    rate_field = TaxRate._meta.get_field("rate")
    for country, tax_class_id, rate in rows:
        rates.setdefault((country, tax_class_id), decimal_from_db(rate_field, rate))
    return TaxRates(rates)
