"""A deadlock victim is run again: MariaDB rolled it back whole, so nothing happened and retrying is safe."""

import threading
from datetime import timedelta

import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

import orders.services.sweeps
from core.db import DEADLOCK, retry_on_deadlock
from inventory.models import Stock
from orders.models import Order
from orders.services import order_place, order_release_expired
from tests.conftest import assert_books_balance, stock_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_real_deadlock_victim_is_retried_and_both_transactions_commit(make_variant):
    """Two sessions lock two rows in opposite orders: MariaDB rolls one back as the victim, which runs again."""
    first, second = (stock_of(make_variant(stock=1)).pk for _ in range(2))
    both_hold_one = threading.Barrier(2, timeout=30)
    attempts, failures = [], []

    def lock(a, b):
        def run():
            attempts.append((a, b))
            with transaction.atomic():
                Stock.objects.select_for_update().get(pk=a)
                if attempts.count((a, b)) == 1:
                    both_hold_one.wait()  # the first try of each: now each wants the row the other holds
                Stock.objects.select_for_update().get(pk=b)

        try:
            retry_on_deadlock(run)
        except Exception as exc:  # reported below: the victim must not fail
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=lock, args=rows) for rows in [(first, second), (second, first)]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert len(attempts) == 3  # a deadlock happened: one victim, tried twice


@pytest.mark.parametrize("one_by_one", [False, True])
def test_the_expiry_sweep_retries_a_release_that_was_a_deadlock_victim(make_variant, customer, monkeypatch, one_by_one):
    mug = make_variant(sku="MUG", stock=3)
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k1")
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    name = "order_expire" if one_by_one else "order_list_expire"
    real, calls = getattr(orders.services.sweeps, name), []

    def deadlocked_once(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise OperationalError(DEADLOCK, "Deadlock found when trying to get lock; try restarting transaction")
        return real(**kwargs)

    monkeypatch.setattr(orders.services.sweeps, name, deadlocked_once)
    result = order_release_expired(batch_size=10, one_by_one=one_by_one)
    assert (result.done, result.skipped, len(calls)) == (1, [], 2)
    assert Order.objects.get(pk=order.pk).status == Order.Status.EXPIRED
    assert_books_balance(mug)
