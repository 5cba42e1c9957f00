"""The limit per customer: how many units of a product one buyer may hold across unpaid and paid orders.

Placing an order and reviving an expired one both apply it, under the products' locks.
"""

from orders.errors import LimitExceeded


def order_lines_check_limits(lines, variants: dict, *, held) -> None:
    """``LimitExceeded`` for the first line that would leave its buyer holding more than its product's
    limit per customer. ``lines``: (sku, quantity); ``products``: the orderable products by SKU;
    ``held(variant_id)``: units the buyer holds already."""
    for sku, quantity in lines:
        limit = variants[sku].max_per_customer
        if limit is not None and (units := held(variants[sku].pk)) + quantity > limit:
            raise LimitExceeded(sku=sku, limit=limit, held=units, allowed=max(limit - units, 0))
