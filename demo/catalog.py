"""The demo catalog ``seed_demo`` makes (products with stock and pictures, shipping zones, tax rates, a staff
user): demo data, not a rule of the shop, so it stays out of the apps it fills."""

import secrets
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.files import File

from inventory.variants import product_variants_generate, variant_create
from shipping.models import ShippingMethod, ShippingZone
from shop.models import Category, Option, OptionValue, Product, ProductVariant
from shop.services import product_image_add
from tax.models import TaxClass, TaxRate

# SKU, name, description, price, initial stock, limit per customer, weight in grams (None: not shipped),
# tax class (None: the country's default rate).
DEMO_PRODUCTS = [
    ("TEE-BLACK-M", "Black T-shirt, M", "Heavy cotton, the one everyone wants.", "19.00", 40, None, 250, None),
    ("TEE-WHITE-M", "White T-shirt, M", "Heavy cotton, in white.", "19.00", 25, None, 250, None),
    ("MUG-LOGO", "Logo mug", "350 ml stoneware.", "12.50", 60, None, 400, None),
    ("CAP-NAVY", "Navy cap", "Adjustable strap.", "22.00", 15, None, 150, None),
    ("SNEAKER-LTD", "Limited sneaker", "Flash-sale drop: 10 pairs only, 2 per customer.", "149.00", 10, 2, 1200, None),
    ("POSTER-A2", "A2 poster", "Printed on 200 g paper.", "9.00", 100, None, 200, None),
    ("SOCKS-3PK", "Socks, 3 pack", "Organic cotton.", "14.00", 0, None, 150, None),
    ("BOOK-SNEAKERS", "Sneaker culture (book)", "240 pages; reduced VAT.", "24.00", 30, None, 900, "Books"),
    ("TICKET-LAUNCH", "Launch party ticket", "An e-ticket: nothing is shipped.", "15.00", 200, 4, None, None),
]
# Categories (a slug, a name, its parent's slug) and each demo SKU's category.
DEMO_CATEGORIES = [
    ("clothing", "Clothing", None), ("t-shirts", "T-shirts", "clothing"), ("shoes", "Shoes", None),
    ("sneakers", "Sneakers", "shoes"), ("accessories", "Accessories", None), ("books", "Books", None),
    ("tickets", "Tickets", None),
]  # fmt: skip
DEMO_CATEGORY_OF = {
    "TEE-BLACK-M": "t-shirts", "TEE-WHITE-M": "t-shirts", "MUG-LOGO": "accessories", "CAP-NAVY": "accessories",
    "SNEAKER-LTD": "sneakers", "POSTER-A2": "accessories", "SOCKS-3PK": "clothing", "BOOK-SNEAKERS": "books",
    "TICKET-LAUNCH": "tickets",
}  # fmt: skip
DEMO_PICTURE_OF = {
    "TEE-BLACK-M": "tee-black", "TEE-WHITE-M": "tee-white", "MUG-LOGO": "mug", "CAP-NAVY": "cap",
    "SNEAKER-LTD": "sneaker-limited", "POSTER-A2": "poster", "SOCKS-3PK": "socks", "BOOK-SNEAKERS": "book",
    "TICKET-LAUNCH": "ticket",
}  # fmt: skip
# Products sold in variants: name, description, category, price, option, values with their stock, pictures
# (file, alt text, the value whose variant it shows; None: every variant).
DEMO_PRODUCTS_WITH_VARIANTS = [
    ("Drop sneaker", "This season's drop, in four sizes; each size is its own stock.", "sneakers", "129.00", "Size",
     [("41", 4), ("42", 0), ("43", 6), ("44", 2)],
     [("drop-sneaker-side", "Blue drop sneaker, side view", None),
      ("drop-sneaker-back", "Blue drop sneaker, from the other side", None)]),
    ("Logo hoodie", "Brushed fleece, one size, in black or white.", "clothing", "59.00", "Colour",
     [("Black", 10), ("White", 8)],
     [("hoodie-black", "Black hoodie with a front pocket", "Black"),
      ("hoodie-white", "White hoodie with a front pocket", "White")]),
]  # fmt: skip
DEMO_IMAGES = Path(__file__).resolve().parent / "demo_images"
# Zones: name, countries, methods (name, price, free from this amount, most grams).
DEMO_SHIPPING = [
    ("Germany", ["DE"], [("Standard", "4.90", "50.00", None), ("Express", "9.90", None, 5000)]),
    ("Europe", ["AT", "BE", "DK", "ES", "FR", "IE", "IT", "NL", "PL", "SE"], [("Standard", "9.90", "100.00", None)]),
    ("Worldwide", ["CA", "CH", "GB", "NO", "US"], [("International", "19.90", None, 10000)]),
]
# Country, tax class (None: the default), rate in percent.
DEMO_TAX_RATES = [
    ("DE", None, "19"), ("DE", "Books", "7"), ("AT", None, "20"), ("AT", "Books", "10"), ("FR", None, "20"),
    ("FR", "Books", "5.5"), ("NL", None, "21"), ("NL", "Books", "9"), ("IT", None, "22"), ("ES", None, "21"),
]  # fmt: skip
DEMO_STAFF_USERNAME = "staff"

# Enough to run the shop from the admin: catalog, stock, orders, payments, fulfilment, rates, vouchers.
STAFF_APPS = [
    "shop", "inventory", "orders", "payments", "fulfilment", "shipping", "tax", "vouchers", "drops", "accounts",
]  # fmt: skip


@dataclass
class DemoSeed:
    products_created: int
    products_existing: int
    variants_created: int
    variants_existing: int
    staff_username: str
    staff_password: str | None  # set only when this run chose or changed it


def demo_catalog_seed(*, staff_password: str | None = None) -> DemoSeed:
    """Create the demo catalog, its shipping zones and tax rates, and a staff user. Idempotent: existing
    products keep their stock, and zones and rates that exist are left as staff set them."""
    tax_classes = _demo_shipping_and_tax_seed()
    categories = _demo_categories_seed()
    products, variants = Counter(), Counter()  # "created" and "existing" of each
    for sku, name, description, price, stock, limit, weight, tax_class in DEMO_PRODUCTS:
        made = "existing" if ProductVariant.all_objects.filter(sku=sku).exists() else "created"
        products[made] += 1
        variants[made] += 1
        if made == "existing":
            continue
        variant = variant_create(
            sku=sku,
            name=name,
            description=description,
            price=Decimal(price),
            max_per_customer=limit,
            initial_stock=stock,
            requires_shipping=weight is not None,
            weight_grams=weight,
            tax_class=tax_classes.get(tax_class),
        )
        Product.objects.filter(pk=variant.product_id).update(category=categories[DEMO_CATEGORY_OF[sku]])
        _demo_picture_add(variant.product, DEMO_PICTURE_OF[sku], name)
    for name, description, category, price, option_name, values, pictures in DEMO_PRODUCTS_WITH_VARIANTS:
        made = "existing" if Product.all_objects.filter(name=name).exists() else "created"
        products[made] += 1
        variants[made] += len(values)
        if made == "existing":
            continue
        product = Product.objects.create(name=name, description=description, category=categories[category])
        option, _ = Option.objects.get_or_create(name=option_name)
        made_of = {}
        for position, (value, stock) in enumerate(values):
            option_value, _ = OptionValue.objects.get_or_create(
                option=option, value=value, defaults={"position": position}
            )
            [made_of[value]] = product_variants_generate(product=product, values=[option_value], price=Decimal(price),
                                                         initial_stock=stock)  # fmt: skip
        for position, (picture, alt, value) in enumerate(pictures):
            _demo_picture_add(product, picture, alt, variant=made_of.get(value), position=position)

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
    staff.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=STAFF_APPS))
    return DemoSeed(
        products["created"],
        products["existing"],
        variants["created"],
        variants["existing"],
        DEMO_STAFF_USERNAME,
        password,
    )


def _demo_categories_seed() -> dict[str, Category]:
    categories = {}
    for slug, name, parent in DEMO_CATEGORIES:
        category = Category.objects.filter(slug=slug).first()
        if category is None:
            fields = {"slug": slug, "name": name}
            category = (
                Category.objects.add_child(categories[parent], fields) if parent else Category.objects.add_root(fields)
            )
        categories[slug] = category
    return categories


def _demo_picture_add(product: Product, picture: str, alt: str, *, variant=None, position: int = 0) -> None:
    with (DEMO_IMAGES / f"{picture}.jpg").open("rb") as stored:
        product_image_add(product=product, file=File(stored, name=f"{picture}.jpg"), alt=alt, variant=variant,
                          position=position)  # fmt: skip


def _demo_shipping_and_tax_seed() -> dict[str, TaxClass]:
    """The demo's zones, methods and rates (a newcomer can check out at once); the tax classes by name."""
    for zone_name, countries, methods in DEMO_SHIPPING:
        zone, created = ShippingZone.objects.get_or_create(name=zone_name, defaults={"countries": countries})
        if created:
            ShippingMethod.objects.bulk_create(
                ShippingMethod(zone=zone, name=name, price=Decimal(price), free_above=free and Decimal(free),
                               max_weight_grams=most)
                for name, price, free, most in methods
            )  # fmt: skip
    classes = {}
    for country, class_name, rate in DEMO_TAX_RATES:
        tax_class = None
        if class_name:
            tax_class = classes.get(class_name) or TaxClass.objects.get_or_create(name=class_name)[0]
            classes[class_name] = tax_class
        TaxRate.objects.get_or_create(country=country, tax_class=tax_class, defaults={"rate": Decimal(rate)})
    return classes
