"""Tables that only grow are pruned by beat's ``prune_history``: expired API tokens and sessions, old
processed payment events and records of emails sent. Unprocessed events, live tokens and sessions, recent
rows and the books (orders, payments, the stock ledger) stay."""

from datetime import timedelta

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.utils import timezone
from knox.models import AuthToken

from fulfilment.emails import order_email_list_send
from inventory.models import StockMovement
from orders.models import Order, OrderEmail
from orders.services import order_place
from payments.models import Payment, PaymentEvent
from payments.tasks import prune_history
from tests.conftest import pay

pytestmark = pytest.mark.django_db


def aged(queryset, **fields) -> None:
    """Time passes for these rows: their timestamps move back."""
    queryset.update(**fields)


def test_prune_history_removes_only_what_outlived_its_keep(make_variant, customer, settings, inbox):
    settings.PAYMENT_EVENT_KEEP_DAYS = settings.ORDER_EMAIL_KEEP_DAYS = 30
    mug = make_variant(sku="MUG", stock=10)
    old, recent = (
        pay(order_place(email=f"{key}@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key=key))
        for key in ("old", "recent")
    )
    order_email_list_send()
    old_event = PaymentEvent.all_objects.order_by("pk").first()  # the old order's, paid first
    unprocessed = PaymentEvent.objects.create(provider="local", event_id="evt_waiting", type="x", payload={})
    long_ago = timezone.now() - timedelta(days=31)
    aged(PaymentEvent.all_objects.filter(pk=old_event.pk), processed_at=long_ago)
    aged(PaymentEvent.all_objects.filter(pk=unprocessed.pk), created_at=long_ago)
    aged(OrderEmail.all_objects.filter(order=old), created_at=long_ago)
    aged(Order.objects.filter(pk=old.pk), created_at=long_ago, updated_at=long_ago)  # an order of a month ago
    expired_token, _ = AuthToken.objects.create(customer, expiry=timedelta(seconds=-1))
    live_token, _ = AuthToken.objects.create(customer)
    expired_session, live_session = SessionStore(), SessionStore()
    for session, age in ((expired_session, -60), (live_session, 3600)):
        session["cart"] = {"MUG": 1}
        session.set_expiry(age)
        session.save()
    ledger, emails_before = StockMovement.objects.count(), OrderEmail.all_objects.count()

    pruned = prune_history()

    assert pruned == {"api tokens": 1, "sessions": 1, "payment events": 1, "order emails": 1}
    assert set(AuthToken.objects.values_list("pk", flat=True)) == {live_token.pk}
    assert set(Session.objects.values_list("session_key", flat=True)) == {live_session.session_key}
    assert PaymentEvent.all_objects.filter(pk=unprocessed.pk).exists()  # never processed: kept, however old
    assert PaymentEvent.all_objects.exclude(pk=unprocessed.pk).count() == 1  # the recent order's
    assert set(OrderEmail.all_objects.values_list("order", flat=True)) == {recent.pk}
    assert OrderEmail.all_objects.count() == emails_before - 1
    assert StockMovement.objects.count() == ledger and Order.objects.count() == 2 == Payment.objects.count()
    mug.stock.refresh_from_db()
    assert mug.stock.reserved == 0
    order_email_list_send()  # the pruned record does not make the old order's receipt go again
    assert OrderEmail.all_objects.filter(order=old).count() == 0
