from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from orders.models import Order
from orders.services import order_place
from tests.conftest import assert_books_balance, stock_of

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def overdue_orders(make_product, customer):
    mug = make_product(sku="MUG", stock=20)
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
