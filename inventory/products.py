"""Products with their stock. The catalog knows nothing of stock, so a product is created here.

Every product has a Stock row from the start (the stock services, the admin and the books count on
it); its initial stock arrives through the stock service, so the ledger has it.
"""

import secrets
from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction

from inventory.models import Stock
from inventory.services import stock_restock
from shop.models import Product

# SKU, name, description, price, initial stock, limit per customer.
DEMO_PRODUCTS = [
    ("TEE-BLACK-M", "Black T-shirt, M", "Heavy cotton, the one everyone wants.", "19.00", 40, None),
    ("TEE-WHITE-M", "White T-shirt, M", "Heavy cotton, in white.", "19.00", 25, None),
    ("MUG-LOGO", "Logo mug", "350 ml stoneware.", "12.50", 60, None),
    ("CAP-NAVY", "Navy cap", "Adjustable strap.", "22.00", 15, None),
    ("SNEAKER-LTD", "Limited sneaker", "Flash-sale drop: 10 pairs only, 2 per customer.", "149.00", 10, 2),
    ("POSTER-A2", "A2 poster", "Printed on 200 g paper.", "9.00", 100, None),
    ("SOCKS-3PK", "Socks, 3 pack", "Organic cotton.", "14.00", 0, None),
]
DEMO_STAFF_USERNAME = "staff"


@dataclass
class DemoSeed:
    products_created: int
    products_existing: int
    staff_username: str
    staff_password: str | None  # set only when this run chose or changed it


def product_create(
    *,
    sku: str,
    name: str,
    price: Decimal,
    description: str = "",
    is_active: bool = True,
    max_per_customer: int | None = None,
    sale_starts_at=None,
    initial_stock: int = 0,
    actor=None,
) -> Product:
    """Create a product with its Stock row; initial stock arrives through the inventory service (ledgered)."""
    product = Product(
        sku=sku,
        name=name,
        description=description,
        price=Decimal(price),
        is_active=is_active,
        max_per_customer=max_per_customer,
        sale_starts_at=sale_starts_at,
    )
    product.full_clean()
    with transaction.atomic():
        product.save()
        Stock.objects.create(product=product)
    if initial_stock:
        stock_restock(sku=sku, quantity=initial_stock, reason="initial stock", actor=actor)
    return product


def demo_catalog_seed(*, staff_password: str | None = None) -> DemoSeed:
    """Create the demo catalog and a staff user. Idempotent: existing products keep their stock."""
    created = existing = 0
    for sku, name, description, price, stock, limit in DEMO_PRODUCTS:
        if Product.all_objects.filter(sku=sku).exists():
            existing += 1
            continue
        product_create(
            sku=sku,
            name=name,
            description=description,
            price=Decimal(price),
            max_per_customer=limit,
            initial_stock=stock,
        )
        created += 1

    user_model = get_user_model()
    staff = user_model.objects.filter(username=DEMO_STAFF_USERNAME).first()
    password = staff_password
    if staff is None:
        password = password or secrets.token_urlsafe(12)
        staff = user_model.objects.create_user(username=DEMO_STAFF_USERNAME, password=password, is_staff=True)
    elif password:
        staff.set_password(password)
        staff.save(update_fields=["password"])
    if not staff.is_staff:
        staff.is_staff = True
        staff.save(update_fields=["is_staff"])
    # Enough to run the shop from the admin: catalog, stock and orders.
    staff.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=["shop", "inventory", "orders"]))
    return DemoSeed(created, existing, DEMO_STAFF_USERNAME, password)
