"""The webhook endpoint over HTTP and a real Celery worker: signed events decide paid and failed orders.

The service-level rules (first final outcome wins, late successes re-reserve or refund) are in
tests/orders/services/test_payment_flow.py; here the same events travel as a provider sends them.
"""

import json
import time
from concurrent.futures import ThreadPoolExecutor
from io import StringIO
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest
from django.conf import settings
from django.core.management import call_command

from inventory.models import Reservation, StockMovement
from orders.models import Order
from orders.services import order_place
from payments.models import Payment, PaymentEvent
from payments.providers.local import local_event, local_webhook_secret
from payments.providers.stripe import webhook_sign
from payments.services import order_pay, order_refund
from tests.conftest import assert_books_balance, pay, stock_of
from tests.processes import process_env, wait_for
from tests.test_celery_worker import celery, forget_every_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def empty_queue():
    forget_every_task()
    yield
    forget_every_task()


@pytest.fixture
def webhook_url(live_server) -> str:
    return f"{live_server.url}/payments/local/webhook/"


@pytest.fixture
def worker(tmp_path, webhook_url):
    """A real worker on the test database: it processes stored events and releases stock."""
    env = process_env(LOCAL_PAYMENTS_WEBHOOK_URL=webhook_url)
    with celery("worker", env, tmp_path / "worker.log", "--concurrency=2") as proc:
        yield proc


def post(url: str, payload: bytes, signature: str | None) -> int:
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers["Stripe-Signature"] = signature
    try:
        with urlopen(Request(url, data=payload, headers=headers, method="POST"), timeout=30) as response:
            return response.status
    except HTTPError as refused:
        return refused.code


def signed(event: dict, **sign) -> tuple[bytes, str]:
    payload = json.dumps(event).encode()
    return payload, webhook_sign(payload, secret=sign.pop("secret", local_webhook_secret()), **sign)


def started(make_variant, quantity=2):
    mug = make_variant(sku="MUG", stock=5)
    order = order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": quantity}], idempotency_key="k")
    return mug, order, order_pay(order=order, return_url="http://testserver/")


def test_the_same_success_delivered_five_times_at_once_pays_the_order_once(make_variant, worker, webhook_url):
    mug, order, payment = started(make_variant)
    payload, signature = signed(local_event("checkout.session.completed", payment=payment))

    with ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(lambda _: post(webhook_url, payload, signature), range(5)))

    assert answers == [200] * 5
    wait_for(lambda: Order.objects.get(pk=order.pk).status == "paid", timeout=30, what="the worker to apply it")
    assert PaymentEvent.objects.count() == 1 and Payment.objects.get().state == "captured"
    assert StockMovement.objects.filter(order=order, kind="commit").count() == 1
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert_books_balance(mug)


def test_a_failure_fails_the_order_and_the_worker_releases_its_stock(make_variant, worker, webhook_url):
    mug, order, payment = started(make_variant)

    assert post(webhook_url, *signed(local_event("checkout.session.async_payment_failed", payment=payment))) == 200

    wait_for(lambda: stock_of(mug).reserved == 0, timeout=30, what="the worker to release the stock")
    assert Order.objects.get(pk=order.pk).status == "payment_failed"
    assert Reservation.objects.get(order_line__order=order).release_reason == "payment_failed"
    assert_books_balance(mug)


@pytest.mark.parametrize(
    "forgery",
    ["wrong-secret", "stripes-secret", "stale", "no-signature", "tampered-body", "not-json"],
)
def test_a_forged_or_stale_webhook_is_refused_and_changes_nothing(make_variant, webhook_url, forgery):
    mug, order, payment = started(make_variant)
    payload, signature = signed(local_event("checkout.session.completed", payment=payment))
    if forgery == "wrong-secret":
        payload, signature = signed(json.loads(payload), secret="whsec_someone_else")
    elif forgery == "stripes-secret":  # Stripe's key signs Stripe's events, never the local provider's
        payload, signature = signed(json.loads(payload), secret=settings.STRIPE_WEBHOOK_SECRET)
    elif forgery == "stale":  # a replay of a genuine delivery, past the library's five minutes
        payload, signature = signed(json.loads(payload), timestamp=int(time.time()) - 600)
    elif forgery == "no-signature":
        signature = None
    elif forgery == "tampered-body":
        payload = payload.replace(b"paid", b"PAID")
    else:
        payload = b"{not json"
        signature = webhook_sign(payload, secret=local_webhook_secret())

    assert post(webhook_url, payload, signature) == 400

    assert not PaymentEvent.objects.exists()
    assert Order.objects.get(pk=order.pk).status == "awaiting_payment" and payment.state == "pending"
    assert stock_of(mug).reserved == 2


def test_a_staff_refund_with_restock_shows_in_the_ledger_and_reconcile_stays_clean(make_variant, staff_user):
    mug = make_variant(sku="MUG", stock=5)
    order = pay(order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k"))

    order_refund(order=order, restock=True, actor=staff_user)

    assert Order.objects.get(pk=order.pk).status == "refunded" and Payment.objects.get().state == "refunded"
    restock = StockMovement.objects.get(reason="refund_restock")
    assert (restock.kind, restock.on_hand_delta, restock.actor) == ("restock", 2, staff_user)
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 0)
    out = StringIO()
    call_command("reconcile", stdout=out)  # raises CommandError if the books do not balance
    assert "0 drifted, 0 final order(s) holding stock" in out.getvalue(), out.getvalue()
    assert_books_balance(mug)


def test_a_local_event_sent_to_stripes_endpoint_is_refused_so_no_event_is_filed_under_the_wrong_provider(
    make_variant, client
):
    _, order, payment = started(make_variant)
    payload, signature = signed(local_event("checkout.session.completed", payment=payment))

    stripe = client.post("/payments/stripe/webhook/", payload, content_type="application/json",
                         HTTP_STRIPE_SIGNATURE=signature)  # fmt: skip
    local = client.post("/payments/local/webhook/", payload, content_type="application/json",
                        HTTP_STRIPE_SIGNATURE=signature)  # fmt: skip

    assert (stripe.status_code, local.status_code) == (400, 200)
    assert list(PaymentEvent.objects.values_list("provider", flat=True)) == ["local"]
