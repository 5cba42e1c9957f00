"""The limit per customer: how many units of a product one buyer may hold across unpaid and paid orders.

Placing an order and reviving an expired one both apply it, under the products' locks.
"""

from orders.errors import LimitExceeded


def order_lines_check_limits(lines, products: dict, *, held) -> None:
    """``LimitExceeded`` for the first line that would leave its buyer holding more than its product's
    limit per customer. ``lines``: (sku, quantity); ``products``: the orderable products by SKU;
    ``held(product_id)``: units the buyer holds already."""
    for sku, quantity in lines:
        limit = products[sku].max_per_customer
        if limit is not None and (units := held(products[sku].pk)) + quantity > limit:
            raise LimitExceeded(sku=sku, limit=limit, held=units, allowed=max(limit - units, 0))
