from shop.cart import cart_get


def cart(request):
    """The cart's item count for the header of every page."""
    return {"cart_count": sum(cart_get(request.session).values())} if hasattr(request, "session") else {}
