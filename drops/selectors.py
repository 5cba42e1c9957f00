"""Reads of drops for the line's pages and its runner (the database; waiting buyers never reach it)."""

from django.db.models import QuerySet

from drops.models import Drop, DropVariant


def drop_list_running() -> QuerySet[Drop]:
    """The drops whose line is on: the runner keeps their news and admits their buyers."""
    return Drop.objects.filter(line_on=True).order_by("pk")


def drop_entries(*, drop: Drop) -> list[DropVariant]:
    """The drop's variants (alive ones), with their products, by variant id."""
    return list(
        drop.entries.filter(variant__is_deleted=False).select_related("variant__product").order_by("variant_id")
    )


def drop_of_variant(*, variant_id: int) -> Drop | None:
    """The drop whose line sells this variant now, if any."""
    entries = DropVariant.objects.filter(variant_id=variant_id, drop__line_on=True, drop__is_deleted=False)
    entry = entries.select_related("drop").first()
    return entry.drop if entry is not None else None
