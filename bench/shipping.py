"""Where the benches' orders ship: one zone, one method and the VAT of its country, as a shop has them.

Every design that places orders sends the same address and method, so ours and the plain checkout
both check the address, price the lines and the shipping, and store the same totals.
"""

from decimal import Decimal

ADDRESS = {
    "full_name": "Bench Buyer",
    "line1": "Hauptstrasse 1",
    "city": "Berlin",
    "postal_code": "10115",
    "country": "DE",
}


def bench_shipping_method() -> int:
    """The id of the benches' shipping method to Germany (created once), with Germany's VAT in place."""
    from shipping.models import ShippingMethod, ShippingZone
    from tax.models import TaxRate

    zone, _ = ShippingZone.objects.get_or_create(name="Bench", defaults={"countries": ["DE"]})
    method, _ = ShippingMethod.objects.get_or_create(
        zone=zone, name="Bench post", defaults={"price": Decimal("4.90"), "free_above": Decimal("50.00")}
    )
    if not TaxRate.objects.filter(country="DE", tax_class=None).exists():
        TaxRate.objects.create(country="DE", rate=Decimal(19))
    return method.pk


# The figures of an order a bench writes directly (a fixture, not placed through the checkout).
UNPRICED_ORDER = {"currency": "EUR", "prices_include_tax": True, "subtotal": 0, "tax": 0, "total": 0}
