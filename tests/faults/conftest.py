"""Shared by the fault scenarios: each one ends by checking the books."""

import pytest
from django.db.models import Sum

from inventory.models import Reservation, StockMovement
from tests.conftest import assert_books_balance


def assert_books(*products) -> None:
    """Counters equal the ledger, reserved equals the active reservations, nothing negative, nothing oversold."""
    assert_books_balance(*products)
    for product in products:
        received = StockMovement.objects.filter(
            stock__product=product, kind__in=[StockMovement.Kind.RESTOCK, StockMovement.Kind.ADJUST]
        ).aggregate(units=Sum("on_hand_delta"))["units"]
        taken = Reservation.objects.filter(
            product=product, state__in=[Reservation.State.ACTIVE, Reservation.State.COMMITTED]
        ).aggregate(units=Sum("quantity"))["units"]
        assert (taken or 0) <= received, f"{product.sku}: {taken} units sold or held, only {received} received"


@pytest.fixture
def private_redis_settings(settings, tmp_path):
    """Point this process's caches (locks included) at a private redis-server a test may crash."""
    from tests.processes import RedisServer

    with RedisServer(tmp_path) as redis:
        settings.CACHES = {alias: {**config, "LOCATION": redis.url} for alias, config in settings.CACHES.items()}
        yield redis


@pytest.fixture
def token(django_user_model):
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_user(username="buyer", password="pw-buyer-123")
    return Token.objects.create(user=user).key
