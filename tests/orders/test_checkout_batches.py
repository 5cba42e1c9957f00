"""Addresses, methods and totals travel with the queued request: orders placed together in one group-commit
batch each get the figures, or the refusal, they would get alone."""

from decimal import Decimal

import pytest

from core.errors import DomainError
from orders import services
from orders.models import Order
from tests.conftest import ADDRESS_DE, ADDRESS_US, assert_books_balance, stock_of
from tests.race import answers_of, batch_sizes_recorded, queue_one_by_one

pytestmark = pytest.mark.django_db(transaction=True)

TOKYO = {"full_name": "Taro Yamada", "line1": "1-1 Chiyoda", "city": "Chiyoda-ku", "postal_code": "100-0001",
         "region": "Tokyo", "country": "JP"}  # fmt: skip


def _buy(key, out, sku="HOT", quantity=1, address=None, method=None):
    try:
        order = services.order_place(
            email=f"{key}@example.com",
            items=[{"sku": sku, "quantity": quantity}],
            idempotency_key=key,
            shipping_address=address,
            shipping_method=method,
        )
        out.put((key, {"number": order.number, "total": str(order.total), "method": order.shipping_method_name}))
    except DomainError as exc:
        out.put((key, exc.as_dict()))
    except Exception as exc:
        out.put((key, {"code": "crashed", "detail": repr(exc)}))


def test_shipped_orders_in_one_batch_each_get_their_own_address_method_and_totals(
    make_variant, shipping_rules, monkeypatch, tmp_path
):
    hot = make_variant(sku="HOT", stock=20, price="40.00", requires_shipping=True, weight_grams=2000)
    sizes = batch_sizes_recorded(monkeypatch, "place", tmp_path / "sizes")
    standard, express, overseas = (shipping_rules[name].pk for name in ("standard", "express", "overseas"))
    jobs = [
        {"key": "de-standard", "address": ADDRESS_DE, "method": standard},  # 40.00 < 50: 4.90
        {"key": "de-free", "quantity": 2, "address": ADDRESS_DE, "method": standard},  # 80.00: free
        {"key": "us", "address": ADDRESS_US, "method": overseas},  # untaxed
        {"key": "japan", "address": TOKYO, "method": standard},  # no zone: refused, its unit stays
        {"key": "too-heavy", "quantity": 3, "address": ADDRESS_DE, "method": express},  # 6 kg > 5 kg
        {"key": "no-address", "method": standard},
        {"key": "de-express", "address": ADDRESS_DE, "method": express},
        {"key": "de-standard-again", "address": ADDRESS_DE, "method": standard},  # alike: priced once, the same
    ]

    buyers, out = queue_one_by_one(_buy, jobs)
    answers = answers_of(buyers, out, len(jobs))

    assert sizes() == [len(jobs)]  # one holder placed them all, in one batch
    assert {key: (a.get("total"), a.get("method")) for key, a in answers.items() if "number" in a} == {
        "de-standard": ("44.90", "Standard"),
        "de-free": ("80.00", "Standard"),
        "us": ("59.00", "Overseas"),
        "de-express": ("49.90", "Express"),
        "de-standard-again": ("44.90", "Standard"),
    }
    assert (answers["japan"]["code"], answers["japan"]["country"]) == ("shipping_unavailable", "JP")
    assert answers["too-heavy"]["code"] == "shipping_method_unavailable"
    assert answers["too-heavy"]["methods"] == [standard]
    assert answers["no-address"]["code"] == "invalid_input"
    for key in ("de-standard", "de-free", "us", "de-express", "de-standard-again"):
        order = Order.objects.get(number=answers[key]["number"])
        assert order.total == Decimal(answers[key]["total"])
        assert order.tax == sum(line.tax for line in order.lines.all()) + order.shipping_tax
    assert Order.objects.get(number=answers["us"]["number"]).shipping_address["region"] == "CA"
    assert Order.objects.get(number=answers["de-standard"]["number"]).tax == Decimal("7.17")  # 6.39 + 0.78
    assert stock_of(hot).reserved == 6  # the refused orders took nothing
    assert_books_balance(hot)


def test_orders_of_goods_that_do_not_ship_batch_without_addresses(make_variant, monkeypatch, tmp_path):
    ticket = make_variant(sku="HOT", stock=10, price="15.00")
    sizes = batch_sizes_recorded(monkeypatch, "place", tmp_path / "sizes")
    jobs = [{"key": f"t{n}", "quantity": 1 + n % 2} for n in range(5)]

    buyers, out = queue_one_by_one(_buy, jobs)
    answers = answers_of(buyers, out, len(jobs))

    assert sizes() == [len(jobs)]
    assert {key: answer["total"] for key, answer in answers.items()} == {
        "t0": "15.00", "t1": "30.00", "t2": "15.00", "t3": "30.00", "t4": "15.00",
    }  # fmt: skip
    assert not Order.objects.filter(shipping_address__isnull=False).exists()
    assert stock_of(ticket).reserved == 7
    assert_books_balance(ticket)
