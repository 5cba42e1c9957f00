"""The demo's vouchers (``seed_demo``): demo data, so not among the vouchers' services."""

from decimal import Decimal

from vouchers.models import Voucher

DEMO_VOUCHERS = [
    {
        "code": "DROP10",
        "description": "10% off, the first 100 orders, once per customer",
        "kind": Voucher.Kind.PERCENTAGE,
        "value": Decimal("10"),
        "usage_limit": 100,
        "limit_per_customer": 1,
    },
    {
        "code": "SHIPFREE",
        "description": "Free shipping on orders of 30.00 or more",
        "kind": Voucher.Kind.FREE_SHIPPING,
        "value": Decimal("0"),
        "minimum_subtotal": Decimal("30.00"),
    },
]


def voucher_demo_seed() -> int:
    """The demo's vouchers (``seed_demo``), made once; how many were made now."""
    made = 0
    for fields in DEMO_VOUCHERS:
        if not Voucher.all_objects.filter(code=fields["code"]).exists():
            Voucher.objects.create(**fields)
            made += 1
    return made
