"""Checking out a drop's hold: the buyer a line admitted gives addresses, a method and a voucher for the
units already held (``orders.services.holding``), and the order awaits payment like any other.

No stock moves and no stock lock is taken: the hold's reservation is the order's, so checkout cannot
fail for stock. The order is priced again for where it goes; its expiry stays the checkout window's.
"""

from django.db import IntegrityError, transaction

from core.db import retry_on_deadlock, statements_run
from core.errors import InvalidInput
from orders.errors import OrderExpired
from orders.models import Order
from orders.services.lifecycle import order_complete_free
from orders.services.placing import buyer_fields_check
from orders.services.quoting import order_addresses_check, order_quote
from vouchers.errors import VoucherInvalid
from vouchers.models import Voucher
from vouchers.services import voucher_uses_reserve_statements

Status = Order.Status


def order_hold_checkout(
    *,
    order: Order,
    shipping_address: dict | None = None,
    billing_address: dict | None = None,
    shipping_method: int | None = None,
    voucher: str = "",
    given: dict | None = None,
) -> Order:
    """The held ``order`` with what the buyer gave, awaiting payment. A second submit (a double click)
    returns the order as the first left it; a hold whose window lapsed is ``OrderExpired``."""
    shipping_address, billing_address, shipping_method = order_addresses_check(
        shipping_address, billing_address, shipping_method
    )
    given = buyer_fields_check(given or {})
    lines = order.lines_with_variants()
    # A deadlock victim (the sweep expiring it, a payment) was rolled back whole: try again.
    return retry_on_deadlock(lambda: _checkout(order, lines, shipping_address, billing_address, shipping_method,
                                               voucher, given))  # fmt: skip


def _checkout(order, lines, shipping_address, billing_address, shipping_method, voucher, given) -> Order:
    with transaction.atomic():
        current = Order.all_objects.select_for_update().get(pk=order.pk)
        if current.status != Status.HELD:
            if current.status == Status.AWAITING_PAYMENT or current.is_paid:
                return current
            raise OrderExpired(number=current.number)
        quote = order_quote(
            items=[{"sku": line.variant.sku, "quantity": line.quantity} for line in lines],
            shipping_country=shipping_address["country"] if shipping_address else None,
            billing_country=billing_address["country"] if billing_address else None,
            shipping_method=shipping_method,
            voucher=voucher,
            buyer=current.buyer,
        )
        if quote.price is None:
            raise InvalidInput(fields={"shipping_address": "These goods are shipped: give a shipping address."})
        price = quote.price
        priced_by_variant = {v.pk: (v, p) for (v, _), p in zip(quote.lines, price.lines, strict=True)}
        for line in lines:
            variant, priced = priced_by_variant[line.variant_id]
            line.unit_price, line.line_total = variant.price, priced.line_total
            line.tax_rate, line.tax, line.discount = priced.tax_rate, priced.tax, priced.discount
            line.save(update_fields=["unit_price", "line_total", "tax_rate", "tax", "discount", "updated_at"])
        fields = price.as_order_fields() | {"shipping_address": shipping_address, "billing_address": billing_address}
        fields |= {"status": Status.AWAITING_PAYMENT} | given
        for name, value in fields.items():
            setattr(current, name, value)
        current.save(update_fields=[*fields, "updated_at"])
        if price.voucher_code:
            voucher_pk = Voucher.objects.values_list("pk", flat=True).get(code=price.voucher_code)
            try:
                with transaction.atomic():  # the uses' CHECK refuses one beyond the voucher's limit
                    statements_run(
                        current._state.db,
                        voucher_uses_reserve_statements([(voucher_pk, current.pk, current.buyer, price.discount)]),
                    )
            except IntegrityError:
                raise VoucherInvalid(voucher=price.voucher_code, reason="used_up") from None
    return order_complete_free(order=current)
