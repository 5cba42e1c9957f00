"""Fixtures and factories shared by every test. The suite runs on real MariaDB and Redis (bin/test)."""

import itertools
import json
from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.core.cache import caches
from django.db import connections
from django.test import Client
from django.utils import timezone

from demo.catalog import STAFF_APPS
from drops import line
from drops.models import Drop, DropVariant
from inventory.locks import outage, soldout
from inventory.models import Stock, StockMovement
from inventory.services import stock_restock
from orders.models import Order
from payments.models import Payment, PaymentEvent
from payments.providers.local import (
    LOCAL_OUTCOMES,
    LOCAL_WEBHOOK_SEND,
    LocalProvider,
    local_event,
    local_webhook_secret,
)
from payments.providers.stripe import webhook_sign
from payments.services import order_pay, payment_event_process, payment_event_receive
from shipping.models import ShippingMethod, ShippingZone
from shop.models import Product, ProductVariant
from tax.models import TaxClass, TaxRate
from tests.smtp import smtp_inbox
from vouchers.models import Voucher

_sku_numbers = itertools.count(1)


def pytest_configure(config):
    if connections["default"].vendor != "mysql" or settings.REDIS_MODE != "redis":
        raise pytest.UsageError(
            "The suite proves locking on real MariaDB and Redis: run it with bin/test "
            "(or set DATABASE_URL=mysql://... and REDIS_URL=redis://...)."
        )


@pytest.fixture(autouse=True)
def clean_locks():
    """No lock, nor a sold-out mark beside it, nor an outage of the lock service, may leak from one test
    into the next."""
    caches[settings.LOCK_CACHE_ALIAS].delete_pattern("stock-lock:*")
    sold_out_marks_lapse()
    outage._down_until, outage._down_since = 0.0, None
    soldout._clear_later.clear()
    yield
    caches[settings.LOCK_CACHE_ALIAS].delete_pattern("stock-lock:*")
    sold_out_marks_lapse()


def sold_out_marks_lapse() -> None:
    """For a test that moves orders' expiry into the past to stand for time passing: the sold-out marks
    lapse too, as they would (a mark never outlives the first active reservation of its SKU)."""
    caches[settings.LOCK_CACHE_ALIAS].delete_pattern("stock-lock:*:soldout")
    soldout._seen.clear()  # and this process forgets having seen them (the hint of where to look first)


@pytest.fixture(autouse=True)
def clean_throttles():
    """Throttle counts (logins, orders) live in Redis and must not carry from one test into the next."""
    caches["default"].delete_pattern("throttle_*")
    yield
    caches["default"].delete_pattern("throttle_*")


@pytest.fixture(autouse=True)
def media_root(settings, tmp_path):
    """Images a test stores go to its own directory, never the checkout's ``var/media``."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


@pytest.fixture
def make_variant(db):
    """Create a variant (of a new product of its name unless ``product`` is given), with ``stock`` units
    received through the service (so the ledger has them).

    Not shipped unless ``requires_shipping``: the stock engine's tests place orders without addresses;
    tests/orders/test_checkout_totals.py and the checkout tests ship theirs."""

    def make(
        *,
        sku=None,
        stock=0,
        price="9.99",
        is_active=True,
        name=None,
        requires_shipping=False,
        product=None,
        description="",
        **fields,
    ) -> ProductVariant:
        sku = sku or f"SKU-{next(_sku_numbers):05d}"
        name = name or f"Product {sku}"
        variant = ProductVariant.objects.create(
            product=product or Product.objects.create(name=name, description=description),
            sku=sku,
            name=name,
            price=Decimal(price),
            is_active=is_active,
            requires_shipping=requires_shipping,
            **fields,
        )
        if stock:
            stock_restock(sku=sku, quantity=stock, reason="initial stock")
        else:
            Stock.objects.create(variant=variant)
        return variant

    return make


@pytest.fixture
def make_voucher(db):
    """Create a voucher: 10% off every product, no limits, unless told otherwise (``Voucher`` fields,
    ``products`` and ``categories`` lists)."""

    def make(*, code="DROP20", kind="percentage", value="10", products=(), categories=(), **fields) -> Voucher:
        voucher = Voucher.objects.create(code=code, kind=kind, value=Decimal(value), **fields)
        voucher.products.set(products)
        voucher.categories.set(categories)
        return voucher

    return make


def assert_voucher_books(voucher: Voucher) -> None:
    """The voucher's counters equal its uses by state, and stay within its limit."""
    voucher = Voucher.all_objects.get(pk=voucher.pk)
    uses = Counter(voucher.uses.values_list("state", flat=True))
    assert (voucher.uses_reserved, voucher.uses_committed) == (uses["reserved"], uses["committed"]), voucher.code
    if voucher.usage_limit is not None:
        assert voucher.uses_reserved + voucher.uses_committed <= voucher.usage_limit


@pytest.fixture
def customer(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="pw-alice-123")


def stock_of(variant) -> Stock:
    return Stock.objects.get(variant=variant)


def ledger_sums(stock: Stock) -> tuple[int, int]:
    movements = StockMovement.objects.filter(stock=stock)
    return (
        sum(m.on_hand_delta for m in movements),
        sum(m.reserved_delta for m in movements),
    )


def assert_books_balance(*variants) -> None:
    """Counters equal the ledger sums; nothing negative; reserved equals the active reservations."""
    for variant in variants:
        stock = stock_of(variant)
        assert ledger_sums(stock) == (stock.on_hand, stock.reserved), variant.sku
        assert 0 <= stock.reserved <= stock.on_hand
        active = sum(r.quantity for r in variant.reservations.filter(state="active"))
        assert active == stock.reserved, variant.sku


def assert_told_their_orders(answers: dict, keys: list[str]) -> None:
    """The orders in the database are those of ``keys``, and each buyer was told its order's number."""
    from orders.models import Order

    placed = dict(Order.objects.values_list("idempotency_key", "number"))
    assert sorted(placed) == sorted(keys)
    assert answers == {key: {"number": number} for key, number in placed.items()}


def pay(order: Order, *, decline: bool = False) -> Order:
    """Pay ``order`` as its buyer does with the local provider (or decline), its webhook applied at once as
    the worker applies it (tests/orders/test_payment_webhooks.py runs real workers). The order as it is then.

    A refusal to start paying (an expired order whose stock is gone, a cancelled one) is raised. A
    declined order's stock is released by the release task (``celery_eager`` runs it in-process).
    """
    payment = order_pay(order=order, return_url="http://testserver/")
    if payment.state == Payment.State.PENDING:
        webhook_deliver(local_event(LOCAL_OUTCOMES["decline" if decline else "pay"], payment=payment))
    return Order.all_objects.get(pk=order.pk)


def webhook_deliver(event: dict, *, provider: str = "local") -> None:
    """A verified webhook event from ``provider``, stored as its endpoint stores it, then processed as its
    task processes it."""
    payment_event_receive(provider=provider, event=event)
    payment_event_process(event=PaymentEvent.objects.get(event_id=event["id"]))


@pytest.fixture
def local_webhooks(monkeypatch) -> list[int]:
    """The local provider's webhooks, sent at once through the real endpoint instead of from a task over
    HTTP (the browser and worker tests send them for real); the endpoint's answers, in order."""
    answers = []

    def send_now(provider, event_type: str, *, payment, refunded=None) -> None:
        payload = json.dumps(local_event(event_type, payment=payment, refunded=refunded)).encode()
        signature = webhook_sign(payload, secret=local_webhook_secret())
        response = Client().post(
            "/payments/local/webhook/", payload, content_type="application/json", HTTP_STRIPE_SIGNATURE=signature
        )
        answers.append(response.status_code)

    monkeypatch.setattr(LocalProvider, "webhook_send", send_now)
    return answers


@pytest.fixture
def inbox(settings):
    """A real SMTP server (tests.smtp) the shop's emails go through; its messages are ``inbox.take()``."""
    with smtp_inbox(settings) as handler:
        yield handler


@pytest.fixture
def provider(settings):
    """The shop pays through ``tests.payments.RecordingProvider``: the local provider, recorded."""
    from tests.payments import RecordingProvider

    settings.PAYMENT_PROVIDERS = {**settings.PAYMENT_PROVIDERS, "local": "tests.payments.RecordingProvider"}
    settings.PAYMENT_PROVIDER = "local"
    RecordingProvider.reset()
    return RecordingProvider


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user(username="bob", password="pw-bob-123")


@pytest.fixture
def staff_user(django_user_model):
    return django_user_model.objects.create_user(username="stan", password="pw-stan-123", is_staff=True)


@pytest.fixture
def celery_eager(monkeypatch):
    """Run tasks in-process for service-level tests (the worker tests start real workers instead).

    Also those a service sends by name: Celery's eager mode leaves ``send_task`` to the broker, so here it
    runs the registered task as ``delay`` does.
    """
    from config.celery import app

    app.loader.import_default_modules()  # every app's tasks registered, as in a worker

    def send_task(name, args=None, kwargs=None, **options):
        if name == LOCAL_WEBHOOK_SEND:
            return None  # no server listens for the local provider's webhooks here (``local_webhooks`` sends them)
        return app.tasks[name].apply_async(args, kwargs)

    monkeypatch.setattr(app, "send_task", send_task)
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager = False
    app.conf.task_eager_propagates = False


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


def token_for(user) -> str:
    """A new API token of the user's, as ``POST /api/auth/token/`` would issue it."""
    from knox.models import AuthToken

    return AuthToken.objects.create(user)[1]


def client_for(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


@pytest.fixture
def customer_client(customer):
    return client_for(customer)


@pytest.fixture
def staff_client(shop_staff):
    return client_for(shop_staff)


@pytest.fixture
def shop_staff(staff_user):
    """Staff as ``seed_demo`` makes them: every permission of the shop's apps, not a superuser."""

    staff_user.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=STAFF_APPS))
    return staff_user


@pytest.fixture
def staff_admin(client, shop_staff):
    """The Django test client logged in to the admin as shop staff."""
    client.force_login(shop_staff)
    return client


def messages_of(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


ADDRESS_DE = {
    "full_name": "Erika Mustermann",
    "line1": "Hauptstrasse 1",
    "city": "Berlin",
    "postal_code": "10115",
    "country": "DE",
    "phone": "+49 30 1234567",
}
ADDRESS_US = {
    "full_name": "Jane Doe",
    "line1": "1600 Amphitheatre Pkwy",
    "city": "Mountain View",
    "postal_code": "94043",
    "region": "CA",
    "country": "US",
}


@pytest.fixture
def shipping_rules(db):
    """Germany and France: Standard 4.90 (free from 50.00) and Express 9.90 (up to 5 kg); the US: 19.00.
    VAT in Germany 19%, books 7%; the US untaxed. No zone covers Japan."""
    europe = ShippingZone.objects.create(name="Europe", countries=["DE", "FR"])
    us = ShippingZone.objects.create(name="United States", countries=["US"])
    standard = ShippingMethod.objects.create(zone=europe, name="Standard", price=Decimal("4.90"), free_above=50)
    express = ShippingMethod.objects.create(zone=europe, name="Express", price=Decimal("9.90"), max_weight_grams=5000)
    overseas = ShippingMethod.objects.create(zone=us, name="Overseas", price=Decimal("19.00"))
    books = TaxClass.objects.create(name="Books")
    TaxRate.objects.create(country="DE", rate=Decimal(19))
    TaxRate.objects.create(country="DE", tax_class=books, rate=Decimal(7))
    return {"standard": standard, "express": express, "overseas": overseas, "books": books}


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
        line.line_forget(drop_id=drop.pk)  # ids start again with each test database: no earlier line leaks in
        for variant in variants or [make_variant(stock=units, **variant_fields) for _ in range(sizes)]:
            DropVariant.objects.create(drop=drop, variant=variant)
        made.append(drop.pk)
        return drop

    yield make
    for pk in made:
        line.line_forget(drop_id=pk)
