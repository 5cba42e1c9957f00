"""After a lost lock, a buyer whose key a rival placed meanwhile gets that order back, not an error."""

import threading

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connection

import orders.services.placing_batch
from orders.models import Order
from orders.services import order_place
from tests.conftest import assert_books_balance, stock_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_duplicate_key_after_a_lost_lock_returns_the_order_placed_meanwhile(make_variant, customer, monkeypatch):
    mug = make_variant(sku="MUG", stock=10)
    real_lookup, rival = orders.services.placing_batch.orders_by_key, {}

    def place():
        return order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k1")

    def rival_places_our_key(requests):
        """Our key is not placed yet; then the lock is lost and a rival places it before we insert."""
        found = real_lookup(requests)
        if not rival:
            rival["started"] = True
            caches[settings.LOCK_CACHE_ALIAS].delete_pattern("stock-lock:*")  # Redis lost every lock

            def run():
                try:
                    rival["order"] = place()
                finally:
                    connection.close()

            thread = threading.Thread(target=run)
            thread.start()
            thread.join(60)
        return found

    monkeypatch.setattr(orders.services.placing_batch, "orders_by_key", rival_places_our_key)
    order = place()  # its INSERT hits the rival's row: a duplicate key, then the replay lookup

    assert order.number == rival["order"].number
    assert Order.objects.count() == 1
    assert stock_of(mug).reserved == 2  # our copy's reservation was rolled back with its INSERT
    assert_books_balance(mug)
