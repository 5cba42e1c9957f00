from datetime import timedelta

import pytest
from django.utils import timezone

from drops import line
from drops.models import Drop, DropVariant


@pytest.fixture
def make_drop(db, make_variant):
    """A drop of ``sizes`` variants with ``units`` each, its line open and its sale started, unless told."""
    made = []

    def make(*, sizes=1, units=5, window=600, units_per_buyer=1, opens_in=-60, variants=None, **variant_fields):
        drop = Drop.objects.create(
            name="Drop",
            line_opens_at=timezone.now() + timedelta(seconds=opens_in),
            checkout_window_seconds=window,
            units_per_buyer=units_per_buyer,
        )
        for variant in variants or [make_variant(stock=units, **variant_fields) for _ in range(sizes)]:
            DropVariant.objects.create(drop=drop, variant=variant)
        made.append(drop.pk)
        return drop

    yield make
    for pk in made:
        line.line_forget(drop_id=pk)
