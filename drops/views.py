"""The line's pages: join a drop's line, and wait, told where you stand. Redis only: no database query
and no session write (the pages read no user, no cart; ``templates/drops/base.html`` is lean for that);
a logged-in buyer's account is read from the session cookie's session, once, when they join."""

from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from core.errors import DomainError
from core.numbers import NumberInvalid, number_whole
from drops import passes
from drops.errors import LineClosed, LinePaused
from drops.rules import POLL_MAX_SECONDS, LineState
from drops.waiting import line_enter, news_current, place_told

PAUSED_POLL_SECONDS = 5


def _page(request, template: str, context: dict, *, status: int = 200, refresh: int = 0) -> HttpResponse:
    response = render(request, template, context, status=status)
    if refresh:
        response["Refresh"] = str(refresh)  # asks again without JavaScript, paced by the estimate
    return response


@require_http_methods(["GET", "POST"])
def drop_line(request, pk: int):
    """GET: the place the pass names, else the form to join. POST: join (idempotent), then GET."""
    ticket = passes.pass_of_request(request, drop_id=pk)
    try:
        if request.method == "POST":
            return _join(request, pk, ticket)
        news = news_current(drop_id=pk)
        told = place_told(drop_id=pk, ticket=ticket, news=news) if ticket is not None else None
    except LinePaused as paused:
        return _page(request, "drops/paused.html", {"detail": paused.detail}, status=503, refresh=PAUSED_POLL_SECONDS)
    if told is not None:
        events = f"{settings.DROP_EVENTS_URL}{pk}/" if settings.DROP_EVENTS_URL else ""
        context = {"told": told, "news": news, "events_url": events}
        return _page(request, "drops/waiting.html", context, refresh=told.poll)
    state = news["state"] if news else LineState.NOT_OPEN
    refresh = POLL_MAX_SECONDS // 4 if state == LineState.NOT_OPEN else 0
    return _page(request, "drops/join.html", {"pk": pk, "news": news, "state": state}, refresh=refresh)


def _join(request, pk: int, ticket: int | None):
    # The session is read only if the browser has one (a logged-in buyer): a guest's join reads nothing.
    has_session = settings.SESSION_COOKIE_NAME in request.COOKIES
    customer_id = request.session.get(SESSION_KEY) if has_session else None
    try:
        quantity = number_whole(request.POST.get("quantity", "1"), low=1, high=100)
    except NumberInvalid:
        quantity = 0  # refused by ``line_enter`` with the range the drop allows
    try:
        told, _ = line_enter(
            drop_id=pk,
            sku=request.POST.get("sku", ""),
            quantity=quantity,
            customer_id=int(customer_id) if customer_id else None,
            email=request.POST.get("email", "").strip(),
            ticket=ticket,
        )
    except LineClosed as closed:
        context = {"pk": pk, "state": closed.payload["reason"], "error": closed}
        return _page(request, "drops/join.html", context, status=closed.status_code)
    except DomainError as refusal:
        news = news_current(drop_id=pk)
        state = news["state"] if news else LineState.NOT_OPEN
        context = {"pk": pk, "news": news, "state": state, "error": refusal, "posted": request.POST}
        return _page(request, "drops/join.html", context, status=refusal.status_code)
    response = redirect("drop", pk=pk)
    response.set_cookie(
        passes.cookie_name(pk),
        passes.pass_issue(drop_id=pk, ticket=told.ticket),
        max_age=settings.DROP_PASS_MAX_AGE_SECONDS,
        secure=request.is_secure(),
        httponly=True,
        samesite="Lax",
    )
    return response
