"""The payment providers' side of the shop: one webhook endpoint per provider, and the local provider's page."""

import logging

from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from payments.providers import UnknownProvider, WebhookRefused, payment_provider, provider_for
from payments.providers.local import LOCAL_OUTCOMES, LocalProvider
from payments.selectors import payment_find_by_reference
from payments.services import payment_event_receive

logger = logging.getLogger(__name__)


@csrf_exempt  # providers sign their requests instead (each checks its own header); no session, no CSRF token
@require_POST
def provider_webhook(request, provider: str):
    """Verify the signature with the provider it names, store the event once and answer: a task processes
    it (``payment_event_process``)."""
    try:
        event = provider_for(provider).webhook_verify(request.body, request.headers)
    except UnknownProvider:
        raise Http404("No such payment provider.") from None
    except WebhookRefused as exc:
        logger.warning("refused a %s payment webhook: %s", provider, exc)
        return JsonResponse(
            {"code": "invalid_signature", "detail": "The webhook signature does not verify."}, status=400
        )
    stored = payment_event_receive(provider=provider, event=event)
    return JsonResponse({"received": True, "duplicate": not stored})


@require_http_methods(["GET", "POST"])
def local_checkout(request, reference: str):
    """The local provider's payment page: pay or decline. Its webhook arrives later, from a task."""
    provider = payment_provider()
    if provider.name != LocalProvider.name:
        raise Http404("The local payment provider is off.")
    payment = payment_find_by_reference(reference=reference, provider=LocalProvider.name)
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
