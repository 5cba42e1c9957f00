"""The shopping cart, kept in the session: {sku: quantity}. Nothing is reserved until checkout."""

from django.conf import settings

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


def cart_add(session, *, sku: str, quantity: int) -> None:
    cart_set(session, sku=sku, quantity=cart_get(session).get(sku, 0) + quantity)


def cart_clear(session) -> None:
    session.pop(SESSION_KEY, None)
