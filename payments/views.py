"""Paying for an order from its page: the buyer is sent to the provider's page."""

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.errors import DomainError
from orders.views import order_for_visitor
from payments.services import order_pay


@require_POST
def order_pay_view(request, number: str):
    """Send the buyer to the provider's page; its webhook tells the shop the outcome later."""
    order = order_for_visitor(request, number)
    try:
        payment = order_pay(
            order=order, return_url=request.build_absolute_uri(reverse("order-detail", args=[order.number]))
        )
    except DomainError as exc:
        messages.error(request, exc.explain())
        return redirect("order-detail", number=order.number)
    if payment.state != payment.State.PENDING:
        return redirect("order-detail", number=order.number)  # paid, or a charge being applied: nothing to pay
    return redirect(payment.redirect_url)
