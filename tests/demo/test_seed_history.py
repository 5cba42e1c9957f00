"""seed_history: a made-up history in every status whose books balance, as the services leave them."""

from collections import Counter
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Count, F, Sum
from django.utils import timezone

from demo.history import IDEMPOTENCY_UNIQUE
from fulfilment.models import Shipment, ShipmentLine
from fulfilment.services import Tracking, order_ship
from inventory.models import Reservation, Stock, StockMovement
from inventory.selectors import stock_books
from orders.models import PAID_STATUSES, Order, OrderEmail, OrderLine
from orders.pricing import tax_of
from orders.selectors import order_list_overdue
from orders.services import order_cancel
from payments.models import Payment, Refund, RefundLine
from shipping.models import ShippingMethod
from shop.models import ProductVariant
from tax.models import TaxRate

pytestmark = pytest.mark.django_db(transaction=True)  # the command loads on connections of its own

ORDERS, SKUS = 2000, 20
RELEASED = ["cancelled", "expired", "payment_failed"]  # each released with its status as the reason


def seed(*args: str) -> str:
    out = StringIO()
    call_command("seed_history", *args, "--no-progress", stdout=out, stderr=StringIO())
    return out.getvalue()


def reconcile() -> str:
    out = StringIO()
    call_command("reconcile", "--full", stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def history(settings):
    """ORDERS orders over SKUS SKUs at prices including 19% tax, shipped (taxed too) by the method seed_history
    makes."""
    settings.PRICES_INCLUDE_TAX, settings.SHIPPING_TAXED = True, True
    TaxRate.objects.create(country=settings.SHOP_COUNTRY, rate=Decimal(19))
    return seed("--orders", str(ORDERS), "--skus", str(SKUS), "--overdue", "7")


def test_the_history_has_every_status_with_its_lines_reservations_and_ledger_and_the_books_balance(history):
    assert f"{ORDERS} orders (20 awaiting payment, 7 of them overdue) over {SKUS} SKUs" in history
    # Every status an order keeps for longer than a drop's checkout window: a hold lives minutes, while a
    # line runs, and the history's drops are over.
    assert set(Order.objects.values_list("status", flat=True)) == set(Order.Status.values) - {Order.Status.HELD}
    assert ProductVariant.objects.filter(sku__startswith="HIST-").count() == SKUS
    lines_per_order = Counter(Order.objects.annotate(line_count=Count("lines")).values_list("line_count", flat=True))
    assert set(lines_per_order) == {1, 2, 3}
    assert Reservation.objects.count() == OrderLine.objects.count()
    assert not Reservation.objects.exclude(quantity=F("order_line__quantity")).exists()

    for status, state, reason in [
        ("awaiting_payment", "active", ""),
        *[(status, "committed", "") for status in [*PAID_STATUSES, "refunded"]],
        *[(status, "released", status) for status in RELEASED],
    ]:
        reservations = Reservation.objects.filter(order_line__order__status=status)
        assert set(reservations.values_list("state", "release_reason").distinct()) == {(state, reason)}, status

    kinds = Counter(StockMovement.objects.values_list("kind", flat=True))
    assert kinds["reserve"] == Reservation.objects.count()
    assert kinds["commit"] == Reservation.objects.filter(state="committed").count()
    assert kinds["release"] == Reservation.objects.filter(state="released").count()
    assert kinds["restock"] >= SKUS and set(kinds) == {"restock", "reserve", "commit", "release"}
    assert not StockMovement.objects.exclude(kind="restock").filter(order=None).exists()
    assert not StockMovement.objects.exclude(kind="restock").filter(reservation=None).exists()
    assert not StockMovement.objects.filter(kind="release").exclude(reason=F("reservation__release_reason")).exists()

    assert not [row.describe() for row in stock_books() if row.drifted]
    assert Stock.objects.filter(reserved__gt=0).exists()
    assert f"{SKUS} stock(s) checked, 0 drifted, 0 final order(s) holding stock" in reconcile()


def test_paid_orders_have_their_payment_shipped_ones_their_shipment_and_refunded_ones_their_refund(history):
    for order in Order.objects.filter(status__in=[*PAID_STATUSES, "refunded"]).order_by("?")[:50]:
        payment = Payment.objects.get(order=order)
        assert payment.reference == order.payment_reference and payment.amount == order.total
        assert payment.state == ("refunded" if order.status == "refunded" else "captured")
        assert order.paid_at == payment.charged_at
    assert set(Payment.objects.filter(order__status="payment_failed").values_list("state", flat=True)) == {"failed"}
    assert not Payment.objects.filter(order__status__in=["awaiting_payment", "cancelled", "expired"]).exists()

    shipped = OrderLine.objects.filter(order__status="shipped")
    assert not shipped.exclude(quantity_shipped=F("quantity")).exists()
    partly = Order.objects.filter(status="partially_shipped").annotate(
        shipped=Sum("lines__quantity_shipped"), units=Sum("lines__quantity")
    )
    assert all(0 < order.shipped < order.units for order in partly)
    assert Shipment.objects.count() == Order.objects.filter(status__in=["shipped", "partially_shipped"]).count()
    sent = ShipmentLine.objects.values("order_line").annotate(units=Sum("quantity"))
    assert all(OrderLine.objects.get(pk=row["order_line"]).quantity_shipped == row["units"] for row in sent)
    assert not OrderLine.objects.exclude(order__status__in=["shipped", "partially_shipped"]).filter(
        quantity_shipped__gt=0
    )

    refunded = Order.objects.filter(status="refunded")
    assert not refunded.exclude(amount_refunded=F("total")).exists()
    assert Refund.objects.count() == refunded.count()
    assert RefundLine.objects.count() == OrderLine.objects.filter(order__status="refunded").count()
    assert not OrderLine.objects.filter(order__status="refunded").exclude(quantity_refunded=F("quantity")).exists()
    assert not StockMovement.objects.filter(order__status="refunded", kind="restock").exists()
    assert "Refunds: 0 order(s) and 0 line(s) drifted." in reconcile()


def test_each_order_has_its_own_number_and_idempotency_key_and_the_key_index_is_back(history):
    assert Order.objects.values("number").distinct().count() == ORDERS
    assert Order.objects.values("idempotency_scope", "idempotency_key_hash").distinct().count() == ORDERS
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Order._meta.db_table)
    assert constraints[IDEMPOTENCY_UNIQUE]["unique"]
    assert Order.objects.filter(customer=None).exists() and Order.objects.exclude(customer=None).exists()
    assert 100 <= get_user_model().objects.filter(username__startswith="history-customer-").count()


def test_exactly_the_overdue_orders_asked_for_are_past_their_expiry_and_the_sweep_releases_them(history):
    assert order_list_overdue().count() == 7
    out = StringIO()
    call_command("release_expired", stdout=out, stderr=StringIO())
    assert "Expired 7 order(s)" in out.getvalue()
    assert Order.objects.filter(status="awaiting_payment").count() == 13
    assert f"{SKUS} stock(s) checked, 0 drifted" in reconcile()


def test_the_services_take_the_history_on_where_it_stops(history):
    open_order = Order.objects.filter(status="awaiting_payment", expires_at__gt=timezone.now()).first()
    order_cancel(order=open_order)
    paid = Order.objects.filter(status="paid").first()
    order_ship(order=paid, tracking=Tracking(carrier="DHL", number="1"))

    assert Order.objects.get(pk=open_order.pk).status == "cancelled"
    assert Order.objects.get(pk=paid.pk).status == "shipped"
    assert f"{SKUS} stock(s) checked, 0 drifted, 0 final order(s) holding stock" in reconcile()


def test_orders_are_priced_by_the_shops_rule_and_the_emails_of_the_last_weeks_are_recorded(history):
    method = ShippingMethod.objects.get()
    for order in Order.objects.prefetch_related("lines").order_by("?")[:200]:
        lines = list(order.lines.all())
        assert order.subtotal == sum(line.line_total for line in lines)
        assert all(
            line.tax == tax_of(line.line_total, Decimal(19), included=True, currency=order.currency) for line in lines
        )
        assert order.shipping_price == (0 if order.subtotal >= method.free_above else method.price)
        assert order.shipping_tax == tax_of(order.shipping_price, Decimal(19), included=True, currency=order.currency)
        assert order.tax == sum(line.tax for line in lines) + order.shipping_tax
        assert order.total == order.subtotal + order.shipping_price
        assert order.shipping_address["country"] == settings.SHOP_COUNTRY and order.shipping_method_id == method.pk
    emailed = Order.objects.filter(emails__kind="placed")
    oldest = emailed.order_by("created_at").first().created_at
    kept = timezone.now() - timedelta(days=settings.ORDER_EMAIL_KEEP_DAYS)
    assert kept <= oldest < kept + timedelta(days=1)  # the records of older emails are pruned
    recent = Order.objects.filter(created_at__gte=oldest)
    assert emailed.count() == recent.count()
    for kind, statuses in [
        ("paid", [*PAID_STATUSES, "refunded"]),
        ("expired", ["expired"]),
        ("payment_failed", ["payment_failed"]),
    ]:
        assert OrderEmail.objects.filter(kind=kind).count() == recent.filter(status__in=statuses).count(), kind


def test_every_order_may_be_asked_to_be_overdue():
    seed("--orders", "50", "--skus", "3", "--overdue", "50")
    assert order_list_overdue().count() == Order.objects.count() == 50
    assert "3 stock(s) checked, 0 drifted, 0 final order(s) holding stock" in reconcile()


def test_a_second_run_appends_only_when_told(history):
    with pytest.raises(CommandError, match="--append"):
        seed("--orders", "10", "--skus", "2")
    assert Order.objects.count() == ORDERS

    seed("--orders", "300", "--skus", str(SKUS + 5), "--append")
    assert Order.objects.count() == ORDERS + 300
    assert ProductVariant.objects.filter(sku__startswith="HIST-").count() == SKUS + 5
    assert f"{SKUS + 5} stock(s) checked, 0 drifted, 0 final order(s) holding stock" in reconcile()


def test_prices_without_tax_add_the_tax_to_what_is_paid_and_refunded(settings):
    settings.PRICES_INCLUDE_TAX = False
    TaxRate.objects.create(country=settings.SHOP_COUNTRY, rate=Decimal(19))
    seed("--orders", "500", "--skus", "5")

    assert not Order.objects.exclude(total=F("subtotal") + F("shipping_price") + F("tax")).exists()
    for refund in Refund.objects.prefetch_related("lines__order_line"):
        lines = sum(line.order_line.line_total + line.order_line.tax for line in refund.lines.all())
        assert refund.amount == lines + refund.shipping == refund.order.total
    assert "Refunds: 0 order(s) and 0 line(s) drifted." in reconcile()


@pytest.mark.parametrize(
    "args",
    [
        ["--orders", "0", "--skus", "5"],
        ["--orders", "5", "--skus", "0"],
        ["--orders", "100000001", "--skus", "5"],
        ["--orders", "5", "--skus", "100001"],
        ["--orders", "5", "--skus", "5", "--overdue", "6"],
        ["--orders", "5", "--skus", "5", "--overdue", "-1"],
        ["--orders", "many", "--skus", "5"],
        ["--skus", "5"],
    ],
)
def test_bad_input_is_refused_and_changes_nothing(args):
    with pytest.raises(CommandError):
        seed(*args)
    assert not Order.all_objects.exists()
    assert not ProductVariant.all_objects.exists()
    assert not get_user_model().objects.exists()
