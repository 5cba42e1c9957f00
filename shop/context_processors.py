from shop.cart import cart_get


def cart(request):
    """The cart's item count for the header of every page, read when a page shows it (a template calls a
    callable): a page without the header (a drop's line) reads no session for it."""
    if not hasattr(request, "session"):
        return {}
    return {"cart_count": lambda: sum(cart_get(request.session).values())}
