"""The payment provider's side of the shop: the webhook endpoint, and the local provider's checkout page."""

import logging

from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from orders.payments import LocalProvider, WebhookRefused, payment_provider, webhook_event_verify
from orders.selectors import payment_find_by_reference
from orders.services import payment_event_receive

logger = logging.getLogger(__name__)

LOCAL_OUTCOMES = {"pay": "checkout.session.completed", "decline": "checkout.session.async_payment_failed"}


@csrf_exempt  # the provider signs its requests instead (Stripe-Signature); it has no session or CSRF token
@require_POST
def stripe_webhook(request):
    """Verify the signature, store the event once and answer: a task processes it (``payment_event_process``)."""
    try:
        event = webhook_event_verify(request.body, request.headers.get("Stripe-Signature", ""))
    except WebhookRefused as exc:
        logger.warning("refused a payment webhook: %s", exc)
        return JsonResponse(
            {"code": "invalid_signature", "detail": "The webhook signature does not verify."}, status=400
        )
    stored = payment_event_receive(provider="stripe", event=event)
    return JsonResponse({"received": True, "duplicate": not stored})


@require_http_methods(["GET", "POST"])
def local_checkout(request, reference: str):
    """The local provider's payment page: pay or decline. Its webhook arrives later, from a task."""
    provider = payment_provider()
    if provider.name != LocalProvider.name:
        raise Http404("The local payment provider is off.")
    payment = payment_find_by_reference(reference=reference, provider="local")
    if payment is None:
        raise Http404("No such payment.")
    order_url = reverse("order-detail", args=[payment.order.number])
    if request.method == "POST":
        outcome = LOCAL_OUTCOMES.get(request.POST.get("outcome", ""))
        if outcome is None or payment.state != payment.State.PENDING:
            return redirect(order_url)
        provider.webhook_send(outcome, payment=payment)
        return redirect(order_url)
    return render(request, "payments/local_checkout.html", {"payment": payment, "order_url": order_url})
