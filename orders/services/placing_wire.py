"""What an order to place carries while it queues for a hot SKU's lock, and what its holder answers.

``inventory.locks.wire`` encodes both (msgspec, typed): the holder decodes a request against
``PlaceRequest`` and the buyer an answer against ``Placed``."""

from datetime import datetime
from decimal import Decimal

import msgspec

from inventory.services import (
    StockLine,
)
from orders.models import Order


class PlaceRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An order to place, as it queues for a hot SKU's lock holder (``inventory.locks.wire`` encodes it)."""

    customer_id: int | None
    email: str
    scope: str
    buyer: str
    client_address: str
    idempotency_key: str
    key_hash: str  # hashed by the buyer, not by the lock holder serving a batch
    fingerprint: str
    lines: tuple[StockLine, ...]
    # Checked already (``shipping.addresses``); whether they are needed depends on the products.
    shipping_address: dict[str, str] | None = None
    billing_address: dict[str, str] | None = None
    shipping_method_id: int | None = None
    voucher_code: str = ""  # in capitals (``voucher_code_normal``); "" for none
    # The buyer fields given (``Order.BUYER_FIELDS``), checked, by name; one left empty is not sent.
    given: dict[str, str] = {}
    # A hold for a buyer a drop's line admitted (``orders.services.holding``): the order is HELD for this
    # many seconds, its addresses and method given at its checkout. 0: an order as any other.
    hold_seconds: int = 0

    def __post_init__(self):
        """A request naming a buyer field this code does not know, from a host on newer code, is refused as
        it is decoded (``Malformed``): its holder hands it back to its buyer rather than place the order
        without it. So a new buyer field needs no ``WIRE_VERSION`` bump."""
        if self.given and (unknown := sorted(set(self.given) - set(Order.BUYER_FIELDS))):
            raise ValueError(f"names buyer fields this code does not know: {', '.join(unknown)}")


class PlacedLine(msgspec.Struct, array_like=True):
    """A new order's line as inserted, in the order of the request's lines: what its buyer is shown."""

    id: int
    variant_id: int
    unit_price: Decimal
    name: str
    line_total: Decimal
    tax_rate: Decimal
    tax: Decimal
    discount: Decimal = Decimal(0)


class PlacedPrice(msgspec.Struct, array_like=True):
    """A new order's figures as inserted (``OrderPrice.as_order_fields``)."""

    shipping_method_id: int | None
    shipping_method_name: str
    currency: str
    prices_include_tax: bool
    subtotal: Decimal
    shipping_price: Decimal
    shipping_tax_rate: Decimal
    shipping_tax: Decimal
    tax: Decimal
    total: Decimal
    discount: Decimal = Decimal(0)
    voucher_code: str = ""


class Placed(msgspec.Struct, array_like=True):
    """What the holder tells a buyer of its order: only what the buyer cannot know from its own request.

    ``replayed``: an order placed before with the same key, which the buyer loads as it is now. A new
    order's ``id``, ``created_at`` and ``lines`` are filled in when its batch inserts it, so the buyer
    answers without reading its order back.
    """

    number: str
    expires_at: datetime
    id: int = 0
    created_at: datetime | None = None
    replayed: bool = False
    lines: list[PlacedLine] = []
    price: PlacedPrice | None = None


def order_row(request: PlaceRequest, *, number: str, expires_at: datetime) -> dict:
    """The order row a request makes: the holder inserts it (the model's defaults fill the other fields),
    and the buyer rebuilds it from ``Placed``."""
    return {
        "number": number,
        "status": Order.Status.HELD if request.hold_seconds else Order.Status.AWAITING_PAYMENT,
        "customer_id": request.customer_id,
        "email": request.email,
        "expires_at": expires_at,
        "idempotency_key": request.idempotency_key,
        "idempotency_key_hash": request.key_hash,
        "idempotency_scope": request.scope,
        "buyer": request.buyer,
        "client_address": request.client_address,
        "request_fingerprint": request.fingerprint,
        "shipping_address": request.shipping_address,
        "billing_address": request.billing_address,
        **request.given,
    }
