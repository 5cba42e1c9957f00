"""The signed pass that names a buyer's place in a drop's line: a cookie for the pages, a token for the API.

Signed with the shop's secret (``django.core.signing``), so it is checked without Redis or the database;
Redis says what the place it names is now (``drops.line.line_status``)."""

from django.conf import settings
from django.core import signing

_SALT = "drops.pass"
HEADER = "X-Drop-Pass"  # the API's: the token ``POST /api/drops/{id}/line/`` answered


def cookie_name(drop_id: int) -> str:
    return f"drop_{int(drop_id)}"


def pass_issue(*, drop_id: int, ticket: int) -> str:
    return signing.dumps({"d": int(drop_id), "t": int(ticket)}, salt=_SALT, compress=False)


def pass_ticket(token: str | None, *, drop_id: int) -> int | None:
    """The ticket a pass names for this drop, or None if it is missing, altered, too old or another drop's."""
    if not token:
        return None
    try:
        found = signing.loads(token, salt=_SALT, max_age=settings.DROP_PASS_MAX_AGE_SECONDS)
    except signing.BadSignature:
        return None
    if not isinstance(found, dict) or found.get("d") != int(drop_id) or not isinstance(found.get("t"), int):
        return None
    return found["t"]


def pass_of_request(request, *, drop_id: int) -> int | None:
    """The ticket the request's pass names: the API's header, else the page's cookie."""
    return pass_ticket(request.headers.get(HEADER) or request.COOKIES.get(cookie_name(drop_id)), drop_id=drop_id)
