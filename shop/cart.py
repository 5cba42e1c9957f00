"""The shopping cart, kept in the session: {sku: quantity}. Nothing is reserved until checkout."""

from django.conf import settings

from core.errors import InvalidQuantity
from core.numbers import NumberInvalid, number_whole

SESSION_KEY = "cart"


def cart_get(session) -> dict[str, int]:
    return dict(session.get(SESSION_KEY, {}))


def cart_set(session, *, sku: str, quantity: int) -> None:
    """Set a line's quantity (0 removes it), within the per-line limit."""
    cart = cart_get(session)
    quantity = max(0, min(quantity, settings.MAX_LINE_QUANTITY))
    if quantity:
        cart[sku] = quantity
    else:
        cart.pop(sku, None)
    session[SESSION_KEY] = cart


def cart_clear(session) -> None:
    session.pop(SESSION_KEY, None)


def cart_most(variant) -> int:
    """The most of ``product`` a cart line can hold now: the per-line cap, its limit per customer and what
    is available (``product.available``, as the catalog annotates it)."""
    return max(
        0, min(settings.MAX_LINE_QUANTITY, variant.max_per_customer or settings.MAX_LINE_QUANTITY, variant.available)
    )


def cart_line_change(session, *, variant, quantity, add: bool) -> int:
    """Add ``quantity`` of ``product`` to its line (``add``), or set the line to it (0 removes it); the
    quantity the line holds afterwards.

    ``InvalidQuantity`` naming the product, the reason and the most it can have, for a quantity the shop
    could never sell: not a whole number, below 1 to add (below 0 to set), or a line beyond the per-line
    cap, the limit per customer or what is available now. The cart is unchanged then.
    """
    in_cart = cart_get(session).get(variant.sku, 0)
    text = str(quantity)
    try:  # a minus sign is read here, to be told that a quantity cannot be negative
        wanted = -number_whole(text[1:]) if text.startswith("-") else number_whole(text)
    except NumberInvalid:
        raise _refused(variant, "the quantity must be a whole number", in_cart=in_cart, add=add) from None
    if wanted < (1 if add else 0):
        raise _refused(
            variant, "add at least 1" if add else "the quantity cannot be negative", in_cart=in_cart, add=add
        )
    line = in_cart + wanted if add else wanted
    if line > settings.MAX_LINE_QUANTITY:
        raise _refused(variant, f"at most {settings.MAX_LINE_QUANTITY} per order line", in_cart=in_cart, add=add)
    if variant.max_per_customer is not None and line > variant.max_per_customer:
        raise _refused(variant, f"at most {variant.max_per_customer} per customer", in_cart=in_cart, add=add)
    if line > variant.available and variant.available <= 0:
        raise InvalidQuantity(f"{variant.name} is sold out.", sku=variant.sku, most=0, in_cart=in_cart)
    if line > variant.available:
        raise _refused(variant, f"only {variant.available} available now", in_cart=in_cart, add=add)
    cart_set(session, sku=variant.sku, quantity=line)
    return line


def _refused(variant, reason: str, *, in_cart: int, add: bool) -> InvalidQuantity:
    most = cart_most(variant)
    if add and in_cart >= most:
        can = f"your cart holds the most you can have ({in_cart})"
    elif add and in_cart:
        can = f"you can add at most {most - in_cart} more ({in_cart} already in your cart)"
    else:
        can = f"you can have at most {most}"
    return InvalidQuantity(f"{variant.name}: {reason}; {can}.", sku=variant.sku, most=most, in_cart=in_cart)
