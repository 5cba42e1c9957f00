"""The demo's drop: the Drop sneaker's sizes sell through a line that is open from the moment it is seeded,
so a newcomer meets the line on the first run (``bin/run`` starts its runner)."""

from django.utils import timezone

from drops.models import Drop, DropVariant
from shop.models import ProductVariant

DEMO_DROP_NAME = "Sneaker drop"
DEMO_DROP_SKU_PREFIX = "DROP-SNEAKER-"


def demo_drop_seed() -> Drop | None:
    """Create the demo drop unless one of its name exists; the drop created, or None."""
    if Drop.all_objects.filter(name=DEMO_DROP_NAME).exists():
        return None
    drop = Drop.objects.create(name=DEMO_DROP_NAME, line_opens_at=timezone.now(), checkout_window_seconds=600)
    variants = ProductVariant.objects.filter(sku__startswith=DEMO_DROP_SKU_PREFIX, drop_entry__isnull=True)
    DropVariant.objects.bulk_create([DropVariant(drop=drop, variant=variant) for variant in variants])
    return drop
