"""A rolling upgrade on a hot SKU: a lock holder on older code beside a buyer on newer code, in real
processes on MariaDB and Redis.

The older code here is the shop from before vouchers: its place request has no voucher code, so a
holder of it that served a newer buyer's order would place it at full price. It must leave that order
to its buyer (who places it whole, voucher and all) and still serve the requests of its own code,
whether it is from before versions, of an older version, or of the same version (a bump forgotten:
then it hands the request back, and says so once). A release that adds a buyer field keeps the
version: an older holder hands back the order that gives it, in the same way.
"""

import logging

import msgspec
import pytest

from core.errors import DomainError
from inventory import locks
from inventory.locks import wire
from orders.models import Order
from orders.services import order_place, placing_batch, placing_wire
from tests.conftest import assert_books_balance, assert_voucher_books, stock_of
from tests.race import answers_of, batch_sizes_recorded, queue_one_by_one
from vouchers.models import VoucherUse

pytestmark = pytest.mark.django_db(transaction=True)


def _code_before_vouchers(*, strict: bool) -> None:
    """Queue and serve place requests as the shop did before vouchers, whose request had no voucher code;
    ``strict``: forbidding unknown fields, as this code's request does."""
    fields = [
        (field.name, field.type)
        if field.required
        else (field.name, field.type, msgspec.field(default=field.default, default_factory=field.default_factory))
        for field in msgspec.structs.fields(placing_wire.PlaceRequest)
        if field.name != "voucher_code"
    ]
    forbid = strict and placing_wire.PlaceRequest.__struct_config__.forbid_unknown_fields
    older = msgspec.defstruct(
        "_PlaceRequest", fields, namespace={"voucher_code": ""}, frozen=True, forbid_unknown_fields=forbid
    )
    placing_batch.OrderBatch.request_type = older
    encode = wire.encode
    wire.encode = lambda value: encode(
        older(**{name: getattr(value, name) for name in older.__struct_fields__})
        if isinstance(value, placing_wire.PlaceRequest)
        else value
    )


def _before_versions():
    """The shop before versions: requests tagged with their bare kind, read leniently."""
    locks.request_tag = lambda kind: kind.encode()
    _code_before_vouchers(strict=False)


def _older_version():
    """A release one version back, whose request forbids unknown fields as this one's does."""
    wire.WIRE_VERSION -= 1
    _code_before_vouchers(strict=True)


def _same_version():
    """Older code that kept the version (a bump forgotten): only its refusal of unknown fields is left."""
    _code_before_vouchers(strict=True)


def _buy(key, voucher, out, log, older=None):
    """Place one order of one unit on HOT, on older code if ``older`` makes it so; warnings go to ``log``."""
    if older is not None:
        older()
    handler = logging.FileHandler(log)
    handler.setLevel(logging.WARNING)
    logging.getLogger("inventory").addHandler(handler)
    try:
        order = order_place(
            email="b@example.com", items=[{"sku": "HOT", "quantity": 1}], idempotency_key=key, voucher=voucher
        )
        out.put((key, {"number": order.number, "discount": order.discount}))
    except DomainError as exc:
        out.put((key, exc.as_dict()))
    except Exception as exc:
        out.put((key, {"code": "crashed", "detail": repr(exc)}))


@pytest.mark.parametrize(
    ("older", "handed_back"),
    [
        pytest.param(_before_versions, 0, id="from-before-versions"),
        pytest.param(_older_version, 0, id="an-older-version"),
        pytest.param(_same_version, 1, id="the-same-version-with-fewer-fields"),
    ],
)
def test_an_older_holder_leaves_a_newer_buyers_order_whole_to_its_buyer(
    make_variant, make_voucher, monkeypatch, tmp_path, older, handed_back
):
    hot = make_variant(sku="HOT", stock=10, price="10.00")
    voucher = make_voucher(code="DROP20", value="10")
    batch_sizes = batch_sizes_recorded(monkeypatch, "place", tmp_path / "batches")
    log = tmp_path / "log"

    # The first holds the lock once it is let go: two buyers on older code, a newer one between them.
    buyers, out = queue_one_by_one(
        _buy,
        [
            {"key": "OLD-1", "voucher": "", "log": log, "older": older},
            {"key": "NEW", "voucher": "DROP20", "log": log},
            {"key": "OLD-2", "voucher": "", "log": log, "older": older},
        ],
    )
    answers = answers_of(buyers, out, 3)

    placed = {order.idempotency_key: order for order in Order.objects.all()}
    assert answers == {
        key: {"number": order.number, "discount": order.discount} for key, order in placed.items()
    }  # each buyer was told its order as stored
    assert sorted(placed) == ["NEW", "OLD-1", "OLD-2"]
    assert (placed["NEW"].voucher_code, placed["NEW"].discount) == ("DROP20", 1)  # whole: with its voucher
    assert list(VoucherUse.objects.values_list("order__idempotency_key", flat=True)) == ["NEW"]
    assert batch_sizes() == [2, 1]  # the older holder served its own code's buyers, the newer buyer itself
    warnings = [line for line in log.read_text().splitlines() if line.startswith("handed back")]
    assert len(warnings) == handed_back
    assert all("1 place request(s) queued on HOT" in line and "voucher_code" in line for line in warnings)
    stock = stock_of(hot)
    assert (stock.on_hand, stock.reserved) == (10, 3)
    assert_books_balance(hot)
    assert_voucher_books(voucher)


# A text column placing leaves at its default stands in for the field a newer release adds.
NEW_BUYER_FIELD = "payment_reference"


def _buy_giving(key, given, out, log):
    """Place one order of one unit on HOT giving ``given``; a buyer field in it is one this code adds."""
    Order.BUYER_FIELDS = (*Order.BUYER_FIELDS, *given)
    handler = logging.FileHandler(log)
    handler.setLevel(logging.WARNING)
    logging.getLogger("inventory").addHandler(handler)
    try:
        order = order_place(
            email="b@example.com", items=[{"sku": "HOT", "quantity": 1}], idempotency_key=key, given=given
        )
        out.put((key, {"number": order.number, NEW_BUYER_FIELD: getattr(order, NEW_BUYER_FIELD)}))
    except Exception as exc:
        out.put((key, {"code": "crashed", "detail": repr(exc)}))


def test_a_holder_hands_an_order_giving_a_buyer_field_it_does_not_know_back_to_its_buyer(
    make_variant, monkeypatch, tmp_path
):
    """A release that adds a buyer field keeps the wire version: an older holder takes the newer buyer's
    request, cannot read it whole, and hands it back; the buyer places it with the field."""
    hot = make_variant(sku="HOT", stock=10, price="10.00")
    batch_sizes = batch_sizes_recorded(monkeypatch, "place", tmp_path / "batches")
    log = tmp_path / "log"

    buyers, out = queue_one_by_one(
        _buy_giving,
        [
            {"key": "OLD-1", "given": {}, "log": log},
            {"key": "NEW", "given": {NEW_BUYER_FIELD: "For Bo"}, "log": log},
            {"key": "OLD-2", "given": {}, "log": log},
        ],
    )
    answers = answers_of(buyers, out, 3)

    placed = {order.idempotency_key: order for order in Order.objects.all()}
    assert answers == {
        key: {"number": order.number, NEW_BUYER_FIELD: getattr(order, NEW_BUYER_FIELD)} for key, order in placed.items()
    }
    assert getattr(placed["NEW"], NEW_BUYER_FIELD) == "For Bo"  # whole: with the field its holder did not know
    assert batch_sizes() == [2, 1]  # the older holder served OLD-2 with its own; NEW placed itself
    [warning] = [line for line in log.read_text().splitlines() if line.startswith("handed back")]
    assert "1 place request(s) queued on HOT" in warning
    assert f"names buyer fields this code does not know: {NEW_BUYER_FIELD}" in warning
    assert (stock_of(hot).on_hand, stock_of(hot).reserved) == (10, 3)
    assert_books_balance(hot)
