"""Orders with vouchers placed together in one group-commit batch each get the answer they would get alone,
in queue order, also when one is refused for its voucher after its stock was taken."""

from decimal import Decimal

import pytest

from core.errors import DomainError
from orders.models import Order
from orders.services import order_place
from tests.conftest import assert_books_balance, assert_voucher_books, stock_of
from tests.race import answers_of, batch_sizes_recorded, queue_one_by_one
from vouchers.models import Voucher

pytestmark = pytest.mark.django_db(transaction=True)

# (idempotency key, email, quantity, with the voucher): its answer alone, in this order, at 10.00 a unit
# with 6 units in stock, the voucher giving 2 uses, 1 per customer, on orders of 20.00 or more.
BUYERS = [
    ("a", "ann@example.com", 2, True),  # placed: 4 units left, 1 use left
    ("b", "bob@example.com", 1, True),  # minimum_not_met, after its unit was taken: the unit goes back
    ("c", "Ann+2@Example.com", 2, True),  # limit_per_customer (Ann again), after taking 2 units: back
    ("d", "cat@example.com", 3, True),  # placed with the units b and c gave back: 1 unit left, no use
    ("e", "dan@example.com", 2, False),  # insufficient_stock (the batch then runs again on counts read)
    ("f", "eve@example.com", 1, True),  # used_up, after taking the last unit: it goes back
    ("g", "fay@example.com", 1, False),  # placed, without the voucher, with the unit f gave back
    ("a", "ann@example.com", 2, True),  # a double click on a's order: that order again
]
TOLD = [
    "placed",
    "minimum_not_met",
    "limit_per_customer",
    "placed",
    "insufficient_stock",
    "used_up",
    "placed",
    "placed",
]


def _place(*, sku, code, key, email, quantity, with_voucher) -> dict:
    try:
        order = order_place(
            email=email,
            items=[{"sku": sku, "quantity": quantity}],
            idempotency_key=key,
            voucher=code if with_voucher else "",
        )
        return {"number": order.number, "discount": str(order.discount), "total": str(order.total)}
    except DomainError as exc:
        return exc.as_dict()


def _buy(n, out, **order):
    out.put((n, _place(sku="HOT", code="HOTCODE", **order)))


def _told(answer: dict) -> dict:
    """An answer comparable across the two runs: an order by its key, a refusal without SKU or code."""
    told = {name: value for name, value in answer.items() if name not in ("number", "shortages", "voucher")}
    if "number" in answer:
        told["order_with_key"] = Order.objects.get(number=answer["number"]).idempotency_key.removeprefix("alone-")
    if "shortages" in answer:
        told["shortages"] = [(s["requested"], s["available"]) for s in answer["shortages"]]
    return told


def test_a_batch_of_voucher_orders_tells_each_buyer_what_it_would_be_told_alone(
    make_variant, make_voucher, monkeypatch, tmp_path
):
    """Without the batch runner's undo of a refused step, b's and c's units stay taken: d is refused."""
    hot, alone_variant = (
        make_variant(sku="HOT", stock=6, price="10.00"),
        make_variant(sku="ALONE", stock=6, price="10.00"),
    )
    terms = {"value": "10", "usage_limit": 2, "limit_per_customer": 1, "minimum_subtotal": "20.00"}
    hot_code, alone_code = make_voucher(code="HOTCODE", **terms), make_voucher(code="ALONECODE", **terms)
    batch_sizes = batch_sizes_recorded(monkeypatch, "place", tmp_path / "batches")
    jobs = [
        {"n": n, "key": key, "email": email, "quantity": quantity, "with_voucher": with_voucher}
        for n, (key, email, quantity, with_voucher) in enumerate(BUYERS)
    ]

    processes, out = queue_one_by_one(_buy, jobs)
    batched = answers_of(processes, out, len(jobs))
    assert batch_sizes() == [len(jobs)]  # one holder served them all, in queue order, in one batch

    alone = [
        _place(
            sku="ALONE", code="ALONECODE", key=f"alone-{key}", email=email, quantity=quantity, with_voucher=with_voucher
        )
        for key, email, quantity, with_voucher in BUYERS
    ]
    assert [answer.get("reason", answer.get("code", "placed")) for answer in alone] == TOLD

    assert [_told(batched[n]) for n in range(len(jobs))] == [_told(answer) for answer in alone]
    assert Decimal(batched[0]["discount"]) == Decimal("2.00") and Decimal(batched[6]["discount"]) == 0
    assert stock_of(hot).reserved == stock_of(alone_variant).reserved == 6
    assert [Voucher.objects.get(pk=v.pk).uses_reserved for v in (hot_code, alone_code)] == [2, 2]
    assert_books_balance(hot, alone_variant)
    assert_voucher_books(hot_code)
    assert_voucher_books(alone_code)
