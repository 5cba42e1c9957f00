"""The order admin: read-only records, service-backed actions, soft delete that never strands reserved stock.

Transactional tests: the actions run the order services, whose durable transactions need a real commit.
"""

import threading
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import Permission
from django.db import connections
from django.urls import reverse
from django.utils import timezone

from inventory import locks
from inventory.models import StockMovement
from orders.admin import OrderAdmin
from orders.models import Order
from orders.services import order_cancel, order_expire, order_place
from payments.models import Payment
from payments.providers.local import LocalProvider, local_event
from payments.services import refund_list_settle
from tests.conftest import assert_books_balance, messages_of, pay, stock_of, webhook_deliver

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = reverse("admin:orders_order_changelist")


def place(sku, quantity, key, email="x@example.com"):
    return order_place(email=email, items=[{"sku": sku, "quantity": quantity}], idempotency_key=key)


def make_overdue(*orders):
    Order.objects.filter(pk__in=[o.pk for o in orders]).update(expires_at=timezone.now() - timedelta(seconds=1))


def listed(client, query="") -> set[str]:
    response = client.get(CHANGELIST + query)
    assert response.status_code == 200
    return {order.number for order in response.context["cl"].result_list}


def run_action(client, action, *orders, **extra):
    data = {"action": action, ACTION_CHECKBOX_NAME: [o.pk for o in orders], "index": 0, **extra}
    return client.post(CHANGELIST + "?deleted=all", data)


def test_the_order_pages_open_and_are_read_only(staff_admin, make_variant):
    make_variant(sku="MUG", stock=10, price="12.50")
    make_variant(sku="CAP", stock=10, price="20.00")
    order = order_place(
        email="x@example.com",
        items=[{"sku": "MUG", "quantity": 2}, {"sku": "CAP", "quantity": 1}],
        idempotency_key="k1",
    )
    url = reverse("admin:orders_order_change", args=[order.pk])

    changelist = staff_admin.get(CHANGELIST)
    page = staff_admin.get(url)

    assert changelist.status_code == page.status_code == 200
    [row] = changelist.context["cl"].result_list
    assert (row.number, row.status, str(row.total)) == (order.number, "awaiting_payment", "45.00")
    assert page.context["title"] == "View order"
    lines, shipments, returns, refunds, payments = page.context["inline_admin_formsets"]
    assert [form.instance.variant.sku for form in lines.formset.forms] == ["MUG", "CAP"]
    assert shipments.formset.forms == returns.formset.forms == refunds.formset.forms == payments.formset.forms == []
    assert "/ship/" not in page.content.decode() and "/refund/" not in page.content.decode()  # nor can it be
    assert "2 active until" in page.content.decode()
    assert staff_admin.post(url, {"status": "paid"}).status_code == 403
    assert staff_admin.get(reverse("admin:orders_order_add")).status_code == 403
    assert Order.objects.get().status == "awaiting_payment"


def test_search_and_filters(staff_admin, make_variant):
    make_variant(sku="MUG", stock=10)
    fresh = place("MUG", 1, "k1", email="ann@example.com")
    overdue = place("MUG", 1, "k2", email="bob@example.com")
    paid = pay(place("MUG", 1, "k3"))
    make_overdue(overdue, paid)

    assert listed(staff_admin, f"?q={fresh.number}") == {fresh.number}
    assert listed(staff_admin, "?q=bob@example") == {overdue.number}
    assert listed(staff_admin, "?status=paid") == {paid.number}
    assert listed(staff_admin, "?expired=yes") == {overdue.number}
    assert listed(staff_admin, "?expired=no") == {fresh.number, paid.number}


def test_cancel_selected_cancels_through_the_service_and_reports_each_refusal(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=10)
    first, second = place("MUG", 2, "k1"), place("MUG", 3, "k2")
    already = order_cancel(order=place("MUG", 1, "k3"))
    paid = pay(place("MUG", 1, "k4"))

    response = run_action(staff_admin, "cancel_selected", first, second, already, paid)

    assert response.status_code == 302
    assert messages_of(response) == [
        "Cancelled 2 order(s); their stock is available again.",
        "1 order(s) were already cancelled.",
        f"Not cancelled: {paid.number} (order_not_cancellable: A paid order cannot be cancelled.)",
    ]
    statuses = dict(Order.objects.values_list("number", "status"))
    assert [statuses[o.number] for o in (first, second, already, paid)] == ["cancelled"] * 3 + ["paid"]
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (9, 0)
    assert_books_balance(mug)


def test_release_expired_now_runs_the_sweep_and_reports_it(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=10)
    overdue = [place("MUG", 1, "k1"), place("MUG", 2, "k2")]
    fresh = place("MUG", 4, "k3")
    make_overdue(*overdue)

    response = run_action(staff_admin, "release_expired_now", fresh)  # the selection does not matter

    assert messages_of(response) == ["Released 2 expired order(s): 3 unit(s) back in stock."]
    assert set(Order.objects.filter(status="expired").values_list("pk", flat=True)) == {o.pk for o in overdue}
    assert Order.objects.get(pk=fresh.pk).status == "awaiting_payment"
    assert stock_of(mug).reserved == 4
    assert_books_balance(mug)


def test_release_expired_now_needs_no_ticked_row(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=10)
    make_overdue(place("MUG", 2, "k1"))
    response = staff_admin.post(CHANGELIST, {"action": "release_expired_now", "index": 0})
    assert messages_of(response) == ["Released 1 expired order(s): 2 unit(s) back in stock."]
    assert stock_of(mug).reserved == 0


def test_staff_who_may_only_view_orders_get_no_service_actions(client, staff_user, make_variant):
    make_variant(sku="MUG", stock=10)
    order = place("MUG", 1, "k1")
    staff_user.user_permissions.add(*Permission.objects.filter(codename__in=["view_order", "view_orderline"]))
    client.force_login(staff_user)

    assert client.get(CHANGELIST).context["action_form"] is None
    run_action(client, "cancel_selected", order)
    assert Order.objects.get().status == "awaiting_payment"


def test_delete_is_soft_but_never_for_an_order_that_still_holds_stock(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=10)
    open_order = place("MUG", 2, "k1")
    cancelled = order_cancel(order=place("MUG", 1, "k2"))

    refused = staff_admin.post(reverse("admin:orders_order_delete", args=[open_order.pk]), {"post": "yes"})
    refused_bulk = run_action(staff_admin, "delete_selected", open_order, cancelled, post="yes")

    assert refused.status_code == refused_bulk.status_code == 200
    assert refused.context["protected"] == [
        f"{open_order.number}: awaiting payment, it still holds stock (cancel it first)"
    ]
    assert refused_bulk.context["protected"] == refused.context["protected"]
    assert Order.objects.count() == 2

    response = staff_admin.post(reverse("admin:orders_order_delete", args=[cancelled.pk]), {"post": "yes"})

    assert response.status_code == 302
    assert Order.all_objects.get(pk=cancelled.pk).is_deleted
    assert listed(staff_admin) == {open_order.number}
    assert listed(staff_admin, "?deleted=yes") == {cancelled.number}
    assert staff_admin.get(reverse("admin:orders_order_change", args=[cancelled.pk])).status_code == 200
    assert stock_of(mug).reserved == 2
    assert_books_balance(mug)


@contextmanager
def paid_after_the_delete_check(order, monkeypatch):
    """A customer pays the expired ``order`` just after the admin's delete has checked it (``get_deleted_objects``).

    The payment, in another thread as another web process would run it, reserves the stock again and waits
    at the provider: while the admin goes on to delete, the order awaits payment and holds stock. The charge
    completes when the block ends; yields the payment's outcome.
    """
    charging, resume, outcome = threading.Event(), threading.Event(), {}

    class SlowProvider(LocalProvider):
        def checkout_start(self, **kwargs):
            charging.set()
            resume.wait(30)
            return super().checkout_start(**kwargs)

    def pay_in_another_thread():
        try:
            outcome["status"] = pay(order).status
        finally:
            connections.close_all()

    payer = threading.Thread(target=pay_in_another_thread)
    check = OrderAdmin.get_deleted_objects

    def check_then_pay(admin, objs, request):
        checked = check(admin, objs, request)
        if request.method == "POST":
            payer.start()
            assert charging.wait(10)
        return checked

    monkeypatch.setattr("payments.services.paying.payment_provider", SlowProvider)
    monkeypatch.setattr(OrderAdmin, "get_deleted_objects", check_then_pay)
    try:
        yield outcome
    finally:
        resume.set()
        payer.join(30)


def expired_order(sku, quantity, key):
    order = place(sku, quantity, key)
    make_overdue(order)
    assert order_expire(order=order)
    return order


def test_a_delete_that_a_payment_overtakes_is_refused_and_changes_nothing(staff_admin, make_variant, monkeypatch):
    mug = make_variant(sku="MUG", stock=10)
    order = expired_order("MUG", 2, "k1")

    with paid_after_the_delete_check(order, monkeypatch) as payment:
        response = staff_admin.post(reverse("admin:orders_order_delete", args=[order.pk]), {"post": "yes"})
        during = Order.all_objects.get(pk=order.pk)
        reserved_during = stock_of(mug).reserved

    assert (during.status, during.is_deleted, reserved_during) == ("awaiting_payment", False, 2)
    assert response.status_code == 302
    assert messages_of(response) == [
        f"Not deleted: a payment revived {order.number} after you confirmed (awaiting payment again, holding stock);"
        " cancel it first."
    ]
    assert not LogEntry.objects.filter(action_flag=DELETION).exists()
    assert payment == {"status": "paid"}
    assert Order.objects.get(pk=order.pk).status == "paid"
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (8, 0)
    assert_books_balance(mug)


def test_a_bulk_delete_that_a_payment_overtakes_deletes_none_of_the_selection(staff_admin, make_variant, monkeypatch):
    mug = make_variant(sku="MUG", stock=10)
    revived = expired_order("MUG", 2, "k1")
    cancelled = order_cancel(order=place("MUG", 1, "k2"))

    with paid_after_the_delete_check(revived, monkeypatch) as payment:
        response = run_action(staff_admin, "delete_selected", revived, cancelled, post="yes")
        during = {o.number: (o.status, o.is_deleted) for o in Order.all_objects.all()}
        reserved_during = stock_of(mug).reserved

    assert during == {revived.number: ("awaiting_payment", False), cancelled.number: ("cancelled", False)}
    assert reserved_during == 2
    assert response.status_code == 302
    assert messages_of(response) == [
        f"Nothing deleted: a payment revived {revived.number} after you confirmed (awaiting payment again, holding "
        "stock); cancel it first, or leave it out."
    ]
    assert not LogEntry.objects.filter(action_flag=DELETION).exists()
    assert payment == {"status": "paid"}
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (8, 0)
    assert_books_balance(mug)


def test_restore_and_erase_of_deleted_orders(staff_admin, admin_client, make_variant):
    make_variant(sku="MUG", stock=10)
    order = order_cancel(order=place("MUG", 1, "k1"))
    order.delete()

    erase = run_action(admin_client, "hard_delete_selected", order)

    assert messages_of(erase) == [
        f"Kept, because other records need them: {order.number} (still referred to by order lines, stock movements)"
    ]
    assert "hard_delete_selected" not in dict(
        staff_admin.get(CHANGELIST).context["action_form"].fields["action"].choices
    )

    restore = run_action(staff_admin, "restore_selected", order)

    assert messages_of(restore) == ["Restored 1 order."]
    assert listed(staff_admin) == {order.number}


def refund_confirmed(payment) -> None:
    """The provider's webhook confirming the whole refund of ``payment``."""
    webhook_deliver(local_event("charge.refunded", payment=Payment.objects.get(pk=payment.pk)))


@pytest.mark.parametrize("webhook_first", [False, True])
def test_refund_and_restock_says_so_and_restocks_once_whoever_finishes_the_refund(
    staff_admin, make_variant, provider, webhook_first
):
    mug = make_variant(sku="MUG", stock=5)
    order = pay(place("MUG", 2, "a"))
    payment = order.payments.get()
    if webhook_first:  # the provider's confirmation is processed before staff's request returns
        provider.during_refund = refund_confirmed

    response = run_action(staff_admin, "refund_and_restock", order, post="yes")
    refund_confirmed(payment)  # (again) later: nothing more

    assert messages_of(response) == [f"Refunded 1 order(s); their units not shipped are back on hand: {order.number}."]
    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED
    assert provider.refunds == [payment.reference]
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 0)
    assert StockMovement.objects.filter(reason="refund_restock").count() == 1
    assert_books_balance(mug)


def test_a_refund_the_busy_stock_holds_up_is_reported_as_sent_and_restocks_when_confirmed(
    staff_admin, make_variant, provider, settings
):
    settings.LOCK_WAIT_SECONDS = 0.3
    mug = make_variant(sku="MUG", stock=5)
    order = pay(place("MUG", 2, "a"))
    payment = order.payments.get()
    busy = threading.Event()

    def hold_the_lock_meanwhile(_payment):  # another buyer takes the SKU while the provider refunds
        taken = threading.Event()

        def hold():
            with locks.sku_locks(["MUG"]):
                taken.set()
                busy.wait(30)
            connections.close_all()

        threading.Thread(target=hold).start()
        assert taken.wait(10)

    provider.during_refund = hold_the_lock_meanwhile
    response = run_action(staff_admin, "refund_and_restock", order, post="yes")
    busy.set()

    assert messages_of(response) == [
        f"Refund sent to the provider for {order.number}; they turn refunded and their units not shipped go "
        "back on hand when the payment sweep finishes it (the stock was busy just now)."
    ]
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID and stock_of(mug).on_hand == 3
    refund_confirmed(payment)  # the provider's webhook records the amount; completing the refund is ours
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    assert refund_list_settle(older_than=timedelta(0)) == 1
    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED
    assert (stock_of(mug).on_hand, StockMovement.objects.filter(reason="refund_restock").count()) == (5, 1)
    assert_books_balance(mug)


def test_refunding_an_order_refunded_already_says_so_and_restocks_nothing(staff_admin, make_variant, provider):
    mug = make_variant(sku="MUG", stock=5)
    order = pay(place("MUG", 2, "a"))
    refund_confirmed(order.payments.get())  # refunded in the provider's dashboard

    response = run_action(staff_admin, "refund_and_restock", order, post="yes")

    assert messages_of(response) == [f"Not refunded: {order.number} (refunded already: nothing done)"]
    assert stock_of(mug).on_hand == 3 and provider.refunds == []


def test_the_order_list_shows_totals_with_their_currency_and_buyers_by_name(staff_admin, make_variant, customer):
    make_variant(sku="MUG", stock=10, price="12.50")
    guest = place("MUG", 2, "g", email="Guest+tag@example.com")
    own = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="c")

    listing = staff_admin.get(CHANGELIST).content.decode()
    page = staff_admin.get(reverse("admin:orders_order_change", args=[guest.pk])).content.decode()

    assert "€25.00" in listing and "€12.50" in listing and "€25.00" in page
    assert ">guest+tag@example.com<" in listing and ">alice<" in listing
    assert "email:" not in listing and f"user:{customer.pk}" not in listing
    assert own.number in listing


def test_order_lines_and_payments_show_amounts_with_currency_and_no_machine_captions(staff_admin, make_variant):
    mug = make_variant(sku="MUG", stock=10, price="12.50")
    order = pay(place("MUG", 2, "a"))

    page = staff_admin.get(reverse("admin:orders_order_change", args=[order.pk])).content.decode()

    assert f"2 x {mug.pk}" not in page  # OrderLine.__str__ captions no row
    assert page.count("€12.50") == 1 and page.count("€25.00") >= 3  # unit price; line, order and payment totals
    assert "Applied: the order is paid with it" in page and ">captured<" not in page


def test_status_filters_and_columns_show_labels_not_codes(staff_admin, make_variant):
    make_variant(sku="MUG", stock=10)
    pay(place("MUG", 1, "a"), decline=True)

    listing = staff_admin.get(CHANGELIST).content.decode()

    assert "Payment failed" in listing and ">payment_failed<" not in listing
    assert 'href="?status__exact=payment_failed"' in listing  # the filter links by code, labelled in words


def test_a_refund_asks_for_confirmation_first_and_cancel_changes_nothing(staff_admin, make_variant, provider):
    mug = make_variant(sku="MUG", stock=5, price="12.50")
    order = pay(place("MUG", 2, "a", email="ann@example.com"))
    unpaid = place("MUG", 1, "b")

    for action, restock in [("refund_and_restock", "Restock:"), ("refund_only", "No restock:")]:
        page = run_action(staff_admin, action, order, unpaid)
        text = page.content.decode()
        assert page.status_code == 200 and page.templates[0].name == "admin/orders/order/refund_confirmation.html"
        assert order.number in text and "ann@example.com" in text and "€25.00" in text and restock in text
        assert f"{unpaid.number} (Awaiting payment)" in text  # listed as not refunded
        assert 'name="post" value="yes"' in text and "csrfmiddlewaretoken" in text
        assert f'<a href="{CHANGELIST}" class="button cancel-link">Cancel</a>' in text
    assert staff_admin.get(CHANGELIST).status_code == 200  # "Cancel" goes back to the list
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    assert provider.refunds == [] and stock_of(mug).on_hand == 3

    response = run_action(staff_admin, "refund_only", order, post="yes")

    assert messages_of(response)[0].startswith(f"Refunded 1 order(s): {order.number}")
    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED and stock_of(mug).on_hand == 3


def test_the_order_and_payment_event_lists_load_the_stylesheet_that_fits_them(staff_admin, make_variant):
    make_variant(sku="MUG", stock=10)
    pay(place("MUG", 1, "a"))

    for url in [CHANGELIST, reverse("admin:payments_paymentevent_changelist")]:
        page = staff_admin.get(url).content.decode()
        assert "/static/core/admin.css" in page
    events = staff_admin.get(reverse("admin:payments_paymentevent_changelist"))
    assert events.context["cl"].list_display[-1] == "processed"  # a yes/no icon, not a second date
