import pytest
from django.db import transaction

from core.errors import InvalidInput, InvalidQuantity
from inventory.errors import BelowReserved, DuplicateLine, InsufficientStock, StaleStock
from inventory.models import Reservation, Stock, StockMovement
from inventory.services import stock_adjust, stock_commit, stock_release, stock_restock, stock_section
from orders.models import Order
from orders.services import order_place
from shop.errors import ProductUnavailable, UnknownProduct
from tests.conftest import assert_books_balance, stock_of

pytestmark = pytest.mark.django_db


def place(customer, key, *lines):
    return order_place(customer=customer, items=[{"sku": s, "quantity": q} for s, q in lines], idempotency_key=key)


def test_reserve_holds_units_and_writes_the_ledger(make_variant, customer):
    mug, tee = make_variant(sku="MUG", stock=10), make_variant(sku="TEE", stock=4)
    order = place(customer, "k", ("MUG", 3), ("TEE", 4))

    assert (stock_of(mug).reserved, stock_of(mug).available) == (3, 7)
    assert stock_of(tee).available == 0
    assert [r.state for r in Reservation.objects.filter(order_line__order=order)] == ["active", "active"]
    assert StockMovement.objects.filter(order=order, kind="reserve").count() == 2
    assert_books_balance(mug, tee)


def test_reserve_is_all_or_nothing_and_lists_every_short_line(make_variant, customer):
    mug, tee, cap = (
        make_variant(sku="MUG", stock=10),
        make_variant(sku="TEE", stock=1),
        make_variant(sku="CAP", stock=0),
    )
    with pytest.raises(InsufficientStock) as error:
        place(customer, "k", ("MUG", 3), ("TEE", 2), ("CAP", 1))

    assert error.value.code == "insufficient_stock"
    assert sorted(error.value.payload["shortages"], key=lambda s: s["sku"]) == [
        {"sku": "CAP", "requested": 1, "available": 0},
        {"sku": "TEE", "requested": 2, "available": 1},
    ]
    assert stock_of(mug).reserved == 0
    assert not Order.all_objects.exists()
    assert not Reservation.objects.exists()
    assert_books_balance(mug, tee, cap)


def test_commit_moves_units_out_and_twice_is_a_no_op(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order = place(customer, "k", ("MUG", 3))

    first = stock_commit(order=order)
    second = stock_commit(order=order)

    assert [r.pk for r in first] == [r.pk for r in second]
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (7, 0)
    assert StockMovement.objects.filter(order=order, kind="commit").count() == 1
    assert_books_balance(mug)


def test_release_gives_units_back_once(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    order = place(customer, "k", ("MUG", 3))

    first = stock_release(order=order, reason="cancelled")
    second = stock_release(order=order, reason="cancelled")

    assert [r.pk for r in first] == [r.pk for r in second]
    assert first[0].release_reason == "cancelled"
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (10, 0)
    assert StockMovement.objects.filter(order=order, kind="release").count() == 1
    assert stock_commit(order=order) == []  # a released reservation can no longer be sold
    assert_books_balance(mug)


def test_release_refuses_an_unknown_reason(make_variant, customer):
    make_variant(sku="MUG", stock=10)
    order = place(customer, "k", ("MUG", 3))
    with pytest.raises(InvalidInput):
        stock_release(order=order, reason="because")
    assert Reservation.objects.get().state == "active"


def test_adjust_by_delta_and_to_an_absolute_value(make_variant, staff_user):
    mug = make_variant(sku="MUG", stock=10)
    stock_adjust(sku="MUG", delta=-2, reason="broken in storage", actor=staff_user)
    stock = stock_adjust(sku="MUG", set_to=20, reason="stock count", actor=staff_user)

    assert stock.on_hand == 20
    assert list(StockMovement.objects.filter(stock=stock, kind="adjust").values_list("on_hand_delta", flat=True)) == [
        -2,
        12,
    ]
    assert StockMovement.objects.filter(actor=staff_user).count() == 2
    assert_books_balance(mug)


def test_adjust_never_goes_below_reserved(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    place(customer, "k", ("MUG", 6))

    with pytest.raises(BelowReserved) as error:
        stock_adjust(sku="MUG", set_to=5, reason="count")
    assert error.value.payload == {"sku": "MUG", "on_hand": 10, "reserved": 6}
    with pytest.raises(BelowReserved):
        stock_adjust(sku="MUG", delta=-5, reason="count")
    assert stock_of(mug).on_hand == 10
    assert_books_balance(mug)


def test_adjust_with_a_stale_version_is_refused(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    seen = stock_of(mug).version
    place(customer, "k", ("MUG", 1))  # a sale while the editor's form was open

    with pytest.raises(StaleStock) as error:
        stock_adjust(sku="MUG", set_to=50, expected_version=seen, reason="count")
    assert error.value.code == "stale_version"
    assert stock_of(mug).on_hand == 10

    stock_adjust(sku="MUG", set_to=50, expected_version=stock_of(mug).version, reason="count")
    assert stock_of(mug).on_hand == 50


def test_every_change_bumps_the_version(make_variant, customer):
    mug = make_variant(sku="MUG", stock=10)
    versions = [stock_of(mug).version]
    order = place(customer, "k", ("MUG", 1))
    versions.append(stock_of(mug).version)
    stock_commit(order=order)
    versions.append(stock_of(mug).version)
    stock_adjust(sku="MUG", delta=1, reason="found one")
    versions.append(stock_of(mug).version)
    assert versions == sorted(set(versions))


@pytest.mark.parametrize(
    "items, error_type, code",
    [
        ([{"sku": "MUG", "quantity": 0}], InvalidQuantity, "invalid_quantity"),
        ([{"sku": "MUG", "quantity": -1}], InvalidQuantity, "invalid_quantity"),
        ([{"sku": "MUG", "quantity": 10**12}], InvalidQuantity, "invalid_quantity"),
        ([{"sku": "MUG", "quantity": 1.5}], InvalidQuantity, "invalid_quantity"),
        ([{"sku": "MUG", "quantity": "2"}], InvalidQuantity, "invalid_quantity"),
        ([{"sku": "MUG", "quantity": True}], InvalidQuantity, "invalid_quantity"),
        ([{"sku": "MUG", "quantity": None}], InvalidQuantity, "invalid_quantity"),
        ([{"sku": "NOPE", "quantity": 1}], UnknownProduct, "unknown_sku"),
        ([{"sku": "OLD", "quantity": 1}], ProductUnavailable, "product_unavailable"),
        ([{"sku": "GONE", "quantity": 1}], ProductUnavailable, "product_unavailable"),
        ([{"sku": "MUG", "quantity": 1}, {"sku": "mug", "quantity": 2}], DuplicateLine, "duplicate_line"),
        ([{"sku": 7, "quantity": 1}], InvalidInput, "invalid_input"),
        ([{"quantity": 1}], InvalidInput, "invalid_input"),
        (["MUG"], InvalidInput, "invalid_input"),
        ([], InvalidInput, "invalid_input"),
        ({"sku": "MUG", "quantity": 1}, InvalidInput, "invalid_input"),
        ([{"sku": "MUG", "quantity": 1}] * 51, InvalidInput, "invalid_input"),
    ],
)
def test_bad_order_input_raises_a_typed_error_and_changes_nothing(make_variant, customer, items, error_type, code):
    mug = make_variant(sku="MUG", stock=10)
    make_variant(sku="OLD", stock=10, is_active=False)
    make_variant(sku="GONE", stock=10).delete()
    movements_before = StockMovement.objects.count()
    stocks_before = list(Stock.objects.values_list("on_hand", "reserved", "version"))

    with pytest.raises(error_type) as error:
        order_place(customer=customer, items=items, idempotency_key="k")

    assert error.value.code == code
    assert StockMovement.objects.count() == movements_before
    assert list(Stock.objects.values_list("on_hand", "reserved", "version")) == stocks_before
    assert not Order.all_objects.exists()
    assert_books_balance(mug)


@pytest.mark.parametrize(
    "call, code",
    [
        (lambda: stock_restock(sku="MUG", quantity=0, reason="r"), "invalid_quantity"),
        (lambda: stock_restock(sku="MUG", quantity=-3, reason="r"), "invalid_quantity"),
        (lambda: stock_restock(sku="MUG", quantity=10**10, reason="r"), "invalid_quantity"),
        (lambda: stock_restock(sku="MUG", quantity="5", reason="r"), "invalid_quantity"),
        (lambda: stock_restock(sku="NOPE", quantity=5, reason="r"), "unknown_sku"),
        (lambda: stock_restock(sku="GONE", quantity=5, reason="r"), "unknown_sku"),
        (lambda: stock_adjust(sku="MUG", delta=0, reason="r"), "invalid_quantity"),
        (lambda: stock_adjust(sku="MUG", delta=-11, reason="r"), "below_reserved"),
        (lambda: stock_adjust(sku="MUG", set_to=-1, reason="r"), "invalid_quantity"),
        (lambda: stock_adjust(sku="MUG", set_to=5, delta=1, reason="r"), "invalid_input"),
        (lambda: stock_adjust(sku="MUG", reason="r"), "invalid_input"),
        (lambda: stock_adjust(sku="MUG", delta=1, reason=" "), "invalid_input"),
        (lambda: stock_adjust(sku="MUG", delta=999_999_999, reason="r"), "invalid_quantity"),
    ],
)
def test_bad_stock_edits_raise_a_typed_error_and_change_nothing(make_variant, call, code):
    mug = make_variant(sku="MUG", stock=10)
    make_variant(sku="GONE", stock=1).delete()
    before = list(Stock.objects.values_list("on_hand", "reserved", "version"))
    movements_before = StockMovement.objects.count()

    with pytest.raises(Exception) as error:
        call()

    assert getattr(error.value, "code", None) == code
    assert list(Stock.objects.values_list("on_hand", "reserved", "version")) == before
    assert StockMovement.objects.count() == movements_before
    assert_books_balance(mug)


def test_a_stock_section_refuses_to_run_inside_an_outer_transaction(make_variant, transactional_db):
    """The commit must happen before the lock is released; an outer atomic would delay it."""
    make_variant(sku="MUG")
    with pytest.raises(RuntimeError, match="durable"):
        with transaction.atomic():
            with stock_section(skus=["MUG"]):
                pass


def test_the_ledger_is_append_only(make_variant):
    mug = make_variant(sku="MUG", stock=3)
    movement = StockMovement.objects.get(stock__variant=mug)
    with pytest.raises(TypeError):
        movement.save()
    with pytest.raises(TypeError):
        movement.delete()
    with pytest.raises(TypeError):
        StockMovement.objects.all().update(reason="x")
