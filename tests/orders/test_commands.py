import logging
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from inventory.models import StockMovement
from orders.models import Order
from orders.selectors import order_list_deleted_holding_stock, order_list_stuck_holding_stock
from orders.services import order_cancel, order_place, order_release_expired
from orders.tasks import reconcile_stock
from tests.conftest import assert_books_balance, stock_of
from vouchers.models import VoucherUse

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def overdue_orders(make_variant, customer):
    mug = make_variant(sku="MUG", stock=20)
    orders = [
        order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key=f"k{i}") for i in range(5)
    ]
    Order.objects.filter(pk__in=[o.pk for o in orders[:4]]).update(expires_at=timezone.now() - timedelta(seconds=1))
    return mug


def test_release_expired_dry_run_changes_nothing(overdue_orders):
    output = run("release_expired", "--dry-run")
    assert "Would expire 4 order(s), releasing 8 unit(s)." in output
    assert stock_of(overdue_orders).reserved == 10
    assert Order.objects.filter(status="awaiting_payment").count() == 5


def test_release_expired_works_through_batches(overdue_orders):
    output = run("release_expired", "--batch", "3")
    assert "Expired 4 order(s), releasing 8 unit(s)." in output
    assert stock_of(overdue_orders).reserved == 2
    assert Order.objects.filter(status="expired").count() == 4
    assert "Expired 0 order(s)" in run("release_expired")  # a second run finds nothing
    assert_books_balance(overdue_orders)


@pytest.mark.parametrize("batch", ["0", "-1", "abc", "100000"])
def test_release_expired_refuses_a_bad_batch_size(overdue_orders, batch):
    with pytest.raises(CommandError):
        run("release_expired", "--batch", batch)
    assert stock_of(overdue_orders).reserved == 10


# --- reconcile ------------------------------------------------------------------------------------


def test_reconcile_passes_on_balanced_books(make_variant, customer):
    make_variant(sku="MUG", stock=10)
    order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    output = run("reconcile")
    assert "1 stock(s) checked, 0 drifted, 0 final order(s) holding stock, 0 deleted order(s) holding stock." in output


def test_reconcile_detects_a_corrupted_counter_and_fix_repairs_it(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    with connection.cursor() as cursor:  # a bad hand edit, behind the service's back
        cursor.execute("UPDATE inventory_stock SET on_hand = 7 WHERE id = %s", [stock_of(mug).pk])

    with pytest.raises(CommandError) as error:
        run("reconcile")
    assert error.value.returncode == 1

    output = run("reconcile", "--fix")
    assert "Repaired" in output and "0 drifted" in output.split("Repaired")[1]
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (10, 2)
    run("reconcile")  # exits 0 now
    assert_books_balance(mug)


def test_reconcile_finds_a_final_order_still_holding_stock_and_fix_settles_it(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    Order.objects.filter(pk=order.pk).update(status=Order.Status.CANCELLED)  # status moved, stock did not

    with pytest.raises(CommandError):
        run("reconcile")
    run("reconcile", "--fix")

    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (10, 0)
    assert StockMovement.objects.filter(order=order, kind="release").count() == 1
    run("reconcile")


def test_a_failed_payment_whose_release_is_still_queued_is_not_drift_until_two_sweeps_have_passed(
    make_variant, customer
):
    mug = make_variant(sku="MUG", stock=10)
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    failed = Order.objects.filter(pk=order.pk)
    failed.update(status=Order.Status.PAYMENT_FAILED)  # its release task is queued, not run yet

    assert "0 final order(s) holding stock, 0 deleted order(s) holding stock." in run("reconcile")
    assert reconcile_stock() == 0

    failed.update(updated_at=timezone.now() - timedelta(seconds=2 * settings.EXPIRY_SWEEP_SECONDS + 5))
    with pytest.raises(CommandError):  # two sweeps later something is stuck: say so
        run("reconcile")
    assert reconcile_stock() == 1
    run("reconcile", "--fix")
    assert stock_of(mug).reserved == 0
    assert_books_balance(mug)


def _deleted_holding_stock(order):
    """Deleted with its stock still reserved, as a delete that skipped the status check left it."""
    Order.objects.filter(pk=order.pk).update(is_deleted=True, deleted_at=timezone.now())


def test_reconcile_finds_a_deleted_unpaid_order_holding_stock_and_fix_restores_it(make_variant, customer, caplog):
    mug = make_variant(sku="MUG", stock=10)
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")
    _deleted_holding_stock(order)
    Order.all_objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert order_release_expired(batch_size=10).done == 0  # hidden from the expiry sweep

    with caplog.at_level(logging.ERROR, logger="orders"), pytest.raises(CommandError) as error:
        run("reconcile")
    assert error.value.returncode == 1
    assert reconcile_stock() == 1
    assert f"deleted order {order.number} (awaiting_payment) still holds stock" in caplog.text

    output = run("reconcile", "--fix")

    assert "0 final order(s) holding stock, 0 deleted order(s) holding stock." in output.split("Repaired")[1]
    restored = Order.objects.get(pk=order.pk)
    assert (restored.status, stock_of(mug).reserved) == ("awaiting_payment", 2)
    assert order_release_expired(batch_size=10).done == 1  # visible again, so the sweep expires it
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (10, 0)
    run("reconcile")
    assert_books_balance(mug)


def test_reconcile_reports_a_deleted_final_order_holding_stock_and_fix_settles_it(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 3}], idempotency_key="k")
    Order.objects.filter(pk=order.pk).update(status=Order.Status.CANCELLED)  # status moved, stock did not
    _deleted_holding_stock(order)

    with pytest.raises(CommandError):
        run("reconcile")
    assert reconcile_stock() == 1
    output = run("reconcile", "--fix")

    assert f"Order {order.number} is cancelled and deleted but still holds stock." in output
    assert "0 final order(s) holding stock, 0 deleted order(s) holding stock." in output.split("Repaired")[1]
    assert Order.all_objects.filter(pk=order.pk, status="cancelled", is_deleted=True).exists()
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (10, 0)
    assert StockMovement.objects.filter(order=order, kind="release").count() == 1
    assert_books_balance(mug)


def test_reconcile_finds_final_and_deleted_orders_whose_voucher_use_is_still_reserved(
    make_variant, make_voucher, customer
):
    """A voucher's reserved use is held with the stock: an order holding only that one holds stock too."""
    make_variant(sku="MUG", stock=10)
    make_voucher(code="DROP20")
    order = order_cancel(
        order=order_place(
            customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k", voucher="DROP20"
        )
    )
    VoucherUse.objects.filter(order=order).update(state=VoucherUse.State.RESERVED)  # its use not given back

    with pytest.raises(CommandError):
        run("reconcile")
    assert order.number in order_list_stuck_holding_stock().values_list("number", flat=True)
    Order.objects.filter(pk=order.pk).update(is_deleted=True)
    assert list(order_list_deleted_holding_stock()) == [order]
    assert not order_list_stuck_holding_stock().exists()
