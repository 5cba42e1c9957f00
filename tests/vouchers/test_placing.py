"""Vouchers on orders: the discount an order stores, every refusal, and uses reserved with the stock,
committed when paid and given back when the order expires, fails or is cancelled."""

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.clock import db_now
from orders.errors import OrderExpired
from orders.models import Order
from orders.services import order_cancel, order_expire, order_place
from orders.services.voucher_facts import order_voucher_check, order_voucher_read
from payments.services import order_refund
from tests.conftest import ADDRESS_DE, assert_books_balance, assert_voucher_books, pay, stock_of
from tests.orders.test_checkout_page import address_fields
from tests.orders.test_pages import add_to_cart, form_key
from vouchers.errors import VoucherInvalid
from vouchers.models import VOUCHER_CODE_MAX_LENGTH, Voucher, VoucherUse

pytestmark = pytest.mark.django_db


def place_api(client, items, *, voucher=None, key=None, **body):
    body = {"items": items, **body} | ({"voucher": voucher} if voucher is not None else {})
    return client.post("/api/orders/", body, format="json", HTTP_IDEMPOTENCY_KEY=key or uuid.uuid4().hex)


def place_guest(email, *, sku="MUG", quantity=1, voucher="DROP20"):
    return order_place(
        email=email, items=[{"sku": sku, "quantity": quantity}], idempotency_key=uuid.uuid4().hex, voucher=voucher
    )


def refusal_reason(call) -> str:
    with pytest.raises(VoucherInvalid) as refused:
        call()
    return refused.value.payload["reason"]


def uses(voucher) -> tuple[int, int]:
    voucher = Voucher.all_objects.get(pk=voucher.pk)
    return voucher.uses_reserved, voucher.uses_committed


@pytest.fixture
def goods(make_variant, shipping_rules):
    mug = make_variant(sku="MUG", stock=50, price="11.90", requires_shipping=True, weight_grams=400)
    book = make_variant(
        sku="BOOK", stock=50, price="21.40", requires_shipping=True, weight_grams=600, tax_class=shipping_rules["books"]
    )
    return {"mug": mug, "book": book}


def test_a_code_in_any_case_takes_its_discount_off_each_line_and_the_tax_is_on_what_is_left(
    customer_client, goods, shipping_rules, make_voucher
):
    voucher = make_voucher(code="DROP20", value="10")
    items = [{"sku": "MUG", "quantity": 2}, {"sku": "BOOK", "quantity": 1}]
    shipped = {"shipping_address": ADDRESS_DE, "shipping_method": shipping_rules["standard"].pk}

    quote = customer_client.post(
        "/api/checkout/quote/", {"items": items, "voucher": "drop20", **shipped}, format="json"
    )
    response = place_api(customer_client, items, voucher=" Drop20 ", **shipped)

    assert response.status_code == 201, response.json()
    body = response.json()
    # 10% off MUG 23.80 is 2.38, leaving 21.42 that holds 19% = 3.42; off BOOK 21.40 is 2.14, leaving
    # 19.26 that holds 7% = 1.26; shipping 4.90 (the items came to 45.20, under the free 50.00) holds 0.78.
    assert [(line["sku"], line["line_total"], line["discount"], line["tax"]) for line in body["lines"]] == [
        ("MUG", "23.80", "2.38", "3.42"),
        ("BOOK", "21.40", "2.14", "1.26"),
    ]
    figures = ("voucher_code", "subtotal", "discount", "shipping_price", "tax", "total")
    assert tuple(body[name] for name in figures) == ("DROP20", "45.20", "4.52", "4.90", "5.46", "45.58")
    assert quote.status_code == 200 and tuple(quote.json()[name] for name in figures) == tuple(
        body[name] for name in figures
    )  # the quote showed what the order charges
    order = Order.objects.get()
    assert order.total == order.subtotal - order.discount + order.shipping_price
    use = VoucherUse.objects.get()
    assert (use.order, use.state, use.discount, use.buyer) == (order, "reserved", Decimal("4.52"), order.buyer)
    assert uses(voucher) == (1, 0)
    assert_voucher_books(voucher)


def test_a_fixed_amount_and_free_shipping(customer_client, goods, shipping_rules, make_voucher):
    make_voucher(code="FIVE", kind="fixed", value="5.00")
    make_voucher(code="SHIPFREE", kind="free_shipping", value="0")
    shipped = {"shipping_address": ADDRESS_DE, "shipping_method": shipping_rules["express"].pk}

    fixed = place_api(customer_client, [{"sku": "MUG", "quantity": 1}], voucher="five", **shipped).json()
    free = place_api(customer_client, [{"sku": "MUG", "quantity": 1}], voucher="shipfree", **shipped).json()

    assert (fixed["discount"], fixed["shipping_price"], fixed["total"]) == ("5.00", "9.90", "16.80")
    assert (free["discount"], free["shipping_price"], free["total"]) == ("0.00", "0.00", "11.90")
    assert free["shipping_method"]["name"] == "Express"


# (reason, the voucher's terms, the code given): an order refused for each reason there is.
REFUSALS = [
    ("unknown", {}, "NOPE"),
    ("not_started", {"starts_at": "future"}, "DROP20"),
    ("expired", {"ends_at": "past"}, "DROP20"),
    ("used_up", {"usage_limit": 1}, "DROP20"),
    ("limit_per_customer", {"limit_per_customer": 1}, "DROP20"),
    ("minimum_not_met", {"minimum_subtotal": Decimal("100.00")}, "DROP20"),
    ("not_applicable", {"products": "other"}, "DROP20"),
]


def test_each_reason_there_is_has_its_refusal_here():
    assert [reason for reason, _, _ in REFUSALS] == list(VoucherInvalid.REASONS)


@pytest.mark.parametrize(("reason", "terms", "code"), REFUSALS)
def test_every_reason_a_code_does_not_apply_is_a_409_that_places_nothing(
    customer_client, bob, make_variant, make_voucher, reason, terms, code
):
    mug = make_variant(sku="MUG", stock=10, price="12.50")
    other = make_variant(sku="OTHER", stock=10)
    now = db_now()
    terms = terms | {
        name: {"future": now + timedelta(hours=1), "past": now - timedelta(seconds=1), "other": [other.product]}[value]
        for name, value in terms.items()
        if isinstance(value, str)
    }
    voucher = make_voucher(**terms)
    if reason == "used_up":
        place_guest("someone@example.com")  # the one use
    if reason == "limit_per_customer":
        assert place_api(customer_client, [{"sku": "MUG", "quantity": 1}], voucher="DROP20").status_code == 201
    orders, reserved = Order.objects.count(), stock_of(mug).reserved

    response = place_api(customer_client, [{"sku": "MUG", "quantity": 2}], voucher=code)

    assert response.status_code == 409
    body = response.json()
    assert (body["code"], body["reason"], body["voucher"]) == ("voucher_invalid", reason, code)
    assert body["detail"] == VoucherInvalid.REASONS[reason].format(minimum="€100.00")  # the minimum, with currency
    assert Order.objects.count() == orders and stock_of(mug).reserved == reserved  # nothing placed
    assert_books_balance(mug)
    assert_voucher_books(voucher)


@pytest.mark.parametrize("voucher", [123, ["DROP20"], "X" * (VOUCHER_CODE_MAX_LENGTH + 1)])
def test_a_code_that_is_no_code_is_a_400(customer_client, make_variant, make_voucher, voucher):
    make_variant(sku="MUG", stock=10)
    make_voucher()

    response = place_api(customer_client, [{"sku": "MUG", "quantity": 1}], voucher=voucher)

    assert response.status_code == 400 and response.json()["code"] == "invalid_input"
    assert "voucher" in response.json()["fields"] and not Order.objects.exists()


def test_a_replay_with_another_code_is_a_conflict(customer_client, make_variant, make_voucher):
    make_variant(sku="MUG", stock=10)
    make_voucher(code="A10")
    make_voucher(code="B10")

    first = place_api(customer_client, [{"sku": "MUG", "quantity": 1}], voucher="A10", key="k")
    again = place_api(customer_client, [{"sku": "MUG", "quantity": 1}], voucher="a10", key="k")
    other = place_api(customer_client, [{"sku": "MUG", "quantity": 1}], voucher="B10", key="k")

    assert again.status_code == 201 and again.json()["number"] == first.json()["number"]
    assert other.status_code == 422 and other.json()["code"] == "idempotency_conflict"
    assert VoucherUse.objects.count() == 1


def test_the_orders_staged_before_one_in_its_batch_hold_their_uses(make_voucher):
    """A batch writes its orders at its end: those staged before an order hold their uses already."""
    make_voucher(code="OTHER")
    make_voucher(usage_limit=2, limit_per_customer=1)
    reads = order_voucher_read(codes=["DROP20", "OTHER"], skus=["MUG"], buyers=["ann", "cat"])

    def check(code, buyer, staged=()):
        return order_voucher_check(reads, code, buyer=buyer, now=db_now(), lines=[(1, Decimal(20))], staged=staged)

    drop20, other = check("DROP20", "ann"), check("OTHER", "ann")
    assert check("DROP20", "ann", [("ann", other), ("ann", None)]) == drop20  # no use of this voucher
    assert refusal_reason(lambda: check("DROP20", "ann", [("ann", drop20)])) == "limit_per_customer"
    assert refusal_reason(lambda: check("DROP20", "cat", [("ann", drop20), ("bob", drop20)])) == "used_up"


def test_one_use_per_customer_across_email_spellings(make_variant, make_voucher):
    make_variant(sku="MUG", stock=10)
    voucher = make_voucher(limit_per_customer=1)

    place_guest("ann@example.com")

    for spelling in ("Ann@Example.com", " ann+drop@example.com", "ANN+x@EXAMPLE.COM"):
        assert refusal_reason(lambda spelling=spelling: place_guest(spelling)) == "limit_per_customer"
    place_guest("bea@example.com")  # another customer
    assert uses(voucher) == (2, 0)


def test_one_use_per_customer_across_the_api_and_the_checkout_page(
    customer, customer_client, client, make_variant, make_voucher
):
    mug = make_variant(sku="MUG", stock=10, price="12.50")
    voucher = make_voucher(limit_per_customer=1)
    assert place_api(customer_client, [{"sku": "MUG", "quantity": 1}], voucher="DROP20").status_code == 201

    customer.email = "alice@example.com"
    customer.save()
    client.force_login(customer)
    add_to_cart(client, "MUG", 1)
    page = client.post(
        "/checkout/",
        {
            "idempotency_key": form_key(client.get("/checkout/").content.decode()),
            "voucher": "drop20",
            "action": "update",
        },
    ).content.decode()

    assert VoucherInvalid.REASONS["limit_per_customer"] in page.replace("&#x27;", "'")
    assert 'data-testid="total">€12.50<' in page  # the totals shown are without it
    assert Order.objects.count() == 1 and stock_of(mug).reserved == 1 and uses(voucher) == (1, 0)


def test_the_checkout_page_shows_the_discount_before_it_places_the_order(client, make_variant, make_voucher):
    make_variant(sku="MUG", stock=10, price="12.50")
    make_voucher(value="20")
    add_to_cart(client, "MUG", 2)
    key = form_key(client.get("/checkout/").content.decode())

    # Typed and "Place order" pressed at once: the page shows the new total first, placing nothing.
    first = client.post("/checkout/", {"idempotency_key": key, "email": "ann@example.com", "voucher": "drop20"})
    page = first.content.decode()
    assert first.status_code == 200 and not Order.objects.exists()
    assert 'data-testid="discount">&minus;€5.00<' in page and 'data-testid="total">€20.00<' in page
    assert 'name="voucher_shown" value="DROP20"' in page

    placed = client.post(
        "/checkout/",
        {"idempotency_key": form_key(page), "email": "ann@example.com", "voucher": "drop20", "voucher_shown": "DROP20"},
    )

    order = Order.objects.get()
    assert placed["Location"] == f"/orders/{order.number}/"
    assert (order.voucher_code, order.discount, order.total) == ("DROP20", Decimal("5.00"), Decimal("20.00"))
    order_page = client.get(placed["Location"]).content.decode()
    assert "Voucher DROP20" in order_page and "&minus;€5.00" in order_page


def test_a_shipped_checkout_with_a_voucher(client, goods, shipping_rules, make_voucher):
    make_voucher(kind="free_shipping", value="0", code="SHIPFREE")
    add_to_cart(client, "MUG", 1)
    fields = {"email": "ann@example.com", "billing_same": "on", "shipping_method": shipping_rules["standard"].pk}
    fields |= address_fields(ADDRESS_DE) | {"voucher": "shipfree"}
    key = form_key(client.get("/checkout/").content.decode())

    shown = client.post("/checkout/", {"idempotency_key": key, "action": "update", **fields}).content.decode()
    assert "(free with SHIPFREE)" in shown and 'data-testid="total">€11.90<' in shown
    client.post("/checkout/", {"idempotency_key": form_key(shown), "voucher_shown": "SHIPFREE", **fields})

    order = Order.objects.get()
    assert (order.shipping_price, order.total, order.voucher_code) == (Decimal("0"), Decimal("11.90"), "SHIPFREE")


@pytest.mark.django_db(transaction=True)  # a declined order's release task runs after its commit
def test_expiry_a_failed_payment_and_cancel_give_the_use_back_and_payment_commits_it(
    make_variant, make_voucher, celery_eager, provider
):
    mug = make_variant(sku="MUG", stock=10)
    voucher = make_voucher(usage_limit=1)

    first = place_guest("a@example.com")
    assert refusal_reason(lambda: place_guest("b@example.com")) == "used_up"
    order_cancel(order=first)
    assert uses(voucher) == (0, 0)

    second = place_guest("b@example.com")  # takes the use the cancel gave back
    assert pay(second, decline=True).status == Order.Status.PAYMENT_FAILED
    assert uses(voucher) == (0, 0)

    third = place_guest("c@example.com")
    Order.objects.filter(pk=third.pk).update(expires_at=db_now() - timedelta(seconds=1))
    assert order_expire(order=Order.objects.get(pk=third.pk))
    assert uses(voucher) == (0, 0)

    fourth = place_guest("d@example.com")
    assert pay(fourth).status == Order.Status.PAID
    assert uses(voucher) == (0, 1)
    assert refusal_reason(lambda: place_guest("e@example.com")) == "used_up"

    states = dict(VoucherUse.objects.values_list("order__email", "state"))
    assert states == {
        "a@example.com": "released",
        "b@example.com": "released",
        "c@example.com": "released",
        "d@example.com": "committed",
    }
    assert_voucher_books(voucher)
    assert_books_balance(mug)
    call_command("reconcile")  # clean


@pytest.mark.parametrize("gives_back", [False, True])
def test_a_refund_gives_the_use_back_only_if_the_shop_says_so(
    make_variant, make_voucher, provider, settings, gives_back
):
    settings.VOUCHER_RELEASE_ON_REFUND = gives_back
    make_variant(sku="MUG", stock=10)
    voucher = make_voucher(usage_limit=1)
    order = pay(place_guest("a@example.com"))

    order_refund(order=order, restock=True)

    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED
    assert uses(voucher) == ((0, 0) if gives_back else (0, 1))
    assert_voucher_books(voucher)


def test_a_late_payment_of_an_expired_order_takes_its_use_again_or_is_refused(
    make_variant, make_voucher, celery_eager, provider
):
    make_variant(sku="MUG", stock=10)
    voucher = make_voucher(usage_limit=1)
    late = place_guest("a@example.com")
    Order.objects.filter(pk=late.pk).update(expires_at=db_now() - timedelta(seconds=1))
    order_expire(order=Order.objects.get(pk=late.pk))

    assert pay(Order.objects.get(pk=late.pk)).status == Order.Status.PAID  # its use was free: taken again
    assert uses(voucher) == (0, 1)

    taken = place_guest("b@example.com", voucher="")  # no voucher: the limit is not in the way
    voucher.usage_limit = 2
    voucher.save()
    other = place_guest("c@example.com")
    Order.objects.filter(pk=other.pk).update(expires_at=db_now() - timedelta(seconds=1))
    order_expire(order=Order.objects.get(pk=other.pk))
    place_guest("d@example.com")  # takes the use the expiry gave back

    with pytest.raises(OrderExpired, match="voucher"):
        pay(Order.objects.get(pk=other.pk))
    assert uses(voucher) == (1, 1) and taken.voucher_code == ""
    assert_voucher_books(voucher)


def test_an_admin_edit_never_writes_the_use_counters(make_variant, make_voucher):
    make_variant(sku="MUG", stock=10)
    voucher = make_voucher(usage_limit=10)
    stale = Voucher.objects.get(pk=voucher.pk)  # read before the orders below

    place_guest("a@example.com")
    place_guest("b@example.com")
    stale.description = "Drop day"
    stale.save()

    assert uses(voucher) == (2, 0) and Voucher.objects.get(pk=voucher.pk).description == "Drop day"
    assert_voucher_books(voucher)


def test_reconcile_finds_voucher_counters_that_drifted_and_fix_rebuilds_them(make_variant, make_voucher, capsys):
    make_variant(sku="MUG", stock=10)
    voucher = make_voucher()
    place_guest("a@example.com")
    Voucher.all_objects.filter(pk=voucher.pk).update(uses_reserved=5)

    with pytest.raises(CommandError):
        call_command("reconcile")
    assert "voucher DROP20: uses reserved 5 (ledger 1)" in capsys.readouterr().out

    call_command("reconcile", "--fix")  # repairs, checks again: clean
    call_command("reconcile")
    assert uses(voucher) == (1, 0)
