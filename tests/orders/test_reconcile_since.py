"""Reconcile checks refunds and vouchers from their last clean run: what changed since then, not history;
``reconcile --full`` reads everything (as ``tests/inventory/test_ledger_checkpoints.py`` does for the ledger)."""

from datetime import datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.db import connection

from core.clock import db_now
from orders.models import Order
from orders.services import order_place
from orders.services.reconciling import RECONCILED_KEY, reconcile_passed, reconcile_since
from orders.tasks import reconcile_stock
from payments.models import Refund
from payments.services import order_refund
from vouchers.models import Voucher, VoucherUse

pytestmark = pytest.mark.django_db

CHECKS = ["refunds", "vouchers"]
# The rows the two checks read by ``updated_at``, and the rows beside them.
HISTORY = ["orders_order", "orders_orderline", "payments_refund", "payments_refundline", "vouchers_voucher"]


@pytest.fixture(autouse=True)
def no_clean_run_known():
    """Each test starts with no clean run recorded (the marks live in Redis, across tests) and leaves none."""
    cache.delete_many([RECONCILED_KEY.format(check=check) for check in CHECKS])
    yield
    cache.delete_many([RECONCILED_KEY.format(check=check) for check in CHECKS])


def reconcile(*args) -> tuple[int, str]:
    """``manage.py reconcile``'s exit code and output."""
    out = StringIO()
    try:
        call_command("reconcile", *args, stdout=out, stderr=StringIO())
    except CommandError as error:
        return error.returncode, out.getvalue()
    return 0, out.getvalue()


def all_a_day_old() -> None:
    """Everything so far is history: last changed a day ago."""
    with connection.cursor() as cursor:
        for table in [*HISTORY, "vouchers_voucheruse"]:
            cursor.execute(f"UPDATE {table} SET updated_at = updated_at - INTERVAL 1 DAY")


def last_clean_run(check: str) -> datetime:
    """When the check's last clean run began."""
    return datetime.fromisoformat(cache.get(RECONCILED_KEY.format(check=check)))


def behind_the_orms_back(sql: str, params: list) -> None:
    """A hand edit in SQL that leaves ``updated_at`` alone."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_a_check_reads_from_its_last_clean_run_less_the_margin_and_everything_when_none_is_known(settings):
    settings.LEDGER_CHECKPOINT_MARGIN_SECONDS = 300
    started = db_now()
    reconcile_passed(check="refunds", started=started)

    assert reconcile_since(check="refunds") == started - timedelta(seconds=300)
    assert reconcile_since(check="vouchers") is None


# --- refunds ----------------------------------------------------------------------------------------------


@pytest.fixture
def refunded(paid):
    """The paid order with one mug refunded (2.50), all of it a day old and checked clean since."""
    order = paid["order"]
    order_refund(order=order, quantities={"MUG": 1}, restock=False)
    all_a_day_old()
    code, output = reconcile()
    assert code == 0 and "Refunds read: all." in output  # no clean run known yet: everything
    return order


def test_the_refunds_check_reads_no_history_before_its_last_clean_run_and_the_full_one_reads_it(refunded):
    behind_the_orms_back("UPDATE orders_order SET amount_refunded = 3.50 WHERE id = %s", [refunded.pk])

    code, output = reconcile()  # from the last clean run: the order is not read again
    assert code == 0 and "Refunds read: changed since" in output
    assert "Refunds: 0 order(s) and 0 line(s) drifted." in output

    code, output = reconcile("--full")
    assert code == 1 and f"DRIFT order {refunded.number}: refunded 3.50, refunds 2.50" in output

    cache.delete(RECONCILED_KEY.format(check="refunds"))  # the mark lost: the next run reads everything
    code, output = reconcile()
    assert code == 1 and f"DRIFT order {refunded.number}: refunded 3.50, refunds 2.50" in output


DRIFTS = {
    "the order's amount": lambda order: Order.objects.filter(pk=order.pk).update(amount_refunded=Decimal("3.50")),
    "its refund's amount": lambda order: Refund.objects.filter(order=order).update(amount=Decimal("1.50")),
    "its refund refused, the claim kept": lambda order: Refund.objects.filter(order=order).update(state="failed"),
}


@pytest.mark.parametrize("drift", DRIFTS)
def test_the_refunds_check_finds_drift_made_after_its_last_clean_run_until_it_is_fixed(refunded, drift):
    before, clean_run = Order.objects.get(pk=refunded.pk).amount_refunded, last_clean_run("refunds")
    DRIFTS[drift](refunded)

    code, output = reconcile()
    assert code == 1 and "Refunds read: changed since" in output
    assert f"DRIFT order {refunded.number}: refunded" in output
    assert last_clean_run("refunds") == clean_run  # the next run reads from where this one did: found again
    if drift == "its refund refused, the claim kept":  # its units are no refund's either
        assert f"DRIFT order {refunded.number} MUG: 1 unit(s) refunded, refunds 0" in output

    Refund.objects.filter(order=refunded).update(amount=before, state="succeeded")  # staff put it right
    Order.objects.filter(pk=refunded.pk).update(amount_refunded=before)
    code, output = reconcile()
    assert code == 0 and "Refunds: 0 order(s) and 0 line(s) drifted." in output
    assert last_clean_run("refunds") > clean_run


# --- vouchers ---------------------------------------------------------------------------------------------


@pytest.fixture
def used(make_variant, make_voucher):
    """DROP20 used by one unpaid order, all of it a day old and checked clean since."""
    make_variant(sku="MUG", stock=10)
    voucher = make_voucher()
    order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k", voucher="DROP20")
    all_a_day_old()
    code, output = reconcile()
    assert code == 0 and "Vouchers read: all." in output and "1 voucher(s) checked, 0 drifted." in output
    return voucher


def test_the_vouchers_check_reads_no_history_before_its_last_clean_run_and_the_full_one_reads_it(used):
    behind_the_orms_back("UPDATE vouchers_voucher SET uses_reserved = 5 WHERE id = %s", [used.pk])

    code, output = reconcile()  # from the last clean run: the voucher is not read again
    assert code == 0 and "Vouchers read: changed since" in output and "0 voucher(s) checked, 0 drifted." in output
    assert reconcile_stock() == 0  # the task reads from there too

    code, output = reconcile("--full")
    assert code == 1 and "voucher DROP20: uses reserved 5 (ledger 1)" in output

    code, output = reconcile("--full", "--fix")  # rebuilt from its uses; the check after it is clean
    assert code == 0 and "0 drifted." in output.split("Repaired")[1]
    assert Voucher.objects.get(pk=used.pk).uses_reserved == 1


VOUCHER_DRIFTS = {
    "its counter": lambda voucher: Voucher.all_objects.filter(pk=voucher.pk).update(uses_reserved=5),
    "one of its uses": lambda voucher: VoucherUse.objects.filter(voucher=voucher).update(state="released"),
}


@pytest.mark.parametrize("drift", VOUCHER_DRIFTS)
def test_the_vouchers_check_finds_drift_made_after_its_last_clean_run_until_it_is_fixed(used, drift):
    clean_run = last_clean_run("vouchers")
    VOUCHER_DRIFTS[drift](used)

    code, output = reconcile()
    assert code == 1 and "Vouchers read: changed since" in output and "DRIFT voucher DROP20: uses reserved" in output
    assert reconcile_stock() == 1
    assert last_clean_run("vouchers") == clean_run  # the next run reads from where these did: found again

    code, output = reconcile("--fix")
    assert code == 0 and "1 voucher(s) checked, 0 drifted." in output.split("Repaired")[1]
    assert last_clean_run("vouchers") > clean_run
    assert reconcile_stock() == 0
