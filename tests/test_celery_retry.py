"""Every task retries, with a backoff, when a SKU is busy, Redis is unreachable or the database hiccups.

The tasks run eagerly (``apply``), so a retry runs at once in this process; the countdown the task asked for is
recorded from its ``retry`` call. The service each task calls fails once, then runs for real.
"""

import pytest
from django.db import OperationalError

from core.db import SERVER_GONE
from inventory.errors import LockTimeout, LockUnavailable
from orders import tasks
from orders.services import order_place
from payments import tasks as payment_tasks

# Each task, the module it lives in and the service it calls (the name that module imported it under).
TASKS = [
    (tasks.release_order_stock, tasks, "order_reservations_settle"),
    (tasks.sweep_expired_orders, tasks, "order_release_expired"),
    (tasks.sweep_failed_payments, tasks, "order_release_failed_payments"),
    (payment_tasks.settle_payments, payment_tasks, "payment_list_settle"),
]
ERRORS = [LockTimeout(), LockUnavailable(), OperationalError(SERVER_GONE, "MySQL server has gone away")]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
@pytest.mark.parametrize(
    ("task", "module", "service"), TASKS, ids=[task.name.rsplit(".", 1)[1] for task, _, _ in TASKS]
)
def test_a_task_retries_with_a_backoff_and_then_succeeds(
    task, module, service, error, monkeypatch, make_variant, customer
):
    make_variant(sku="MUG", stock=5)
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k1")
    real, calls, retries = getattr(module, service), [], []

    def fails_once(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise error
        return real(**kwargs)

    def retry(**kwargs):
        retries.append(kwargs)
        return original_retry(**kwargs)

    original_retry = task.retry
    monkeypatch.setattr(module, service, fails_once)
    monkeypatch.setattr(task, "retry", retry)

    args = [order.pk] if task is tasks.release_order_stock else []
    assert task.apply(args=args).get() == 0  # the second try ran the service: nothing was due
    assert len(calls) == 2
    assert [kwargs["exc"] for kwargs in retries] == [error]
    assert 0 <= retries[0]["countdown"] <= task.retry_backoff_max
