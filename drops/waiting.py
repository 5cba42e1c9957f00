"""What a buyer in a drop's line is told, read from Redis alone: the pages and the API answer it.

``line_enter`` joins (one place per identity: an account, a canonical email; the pass itself for a
second tab) and ``place_told`` says where a place stands; neither touches the database, and both raise
``LinePaused`` when Redis is down (every place is kept) or the runner has stopped confirming the news.
"""

from dataclasses import dataclass
from datetime import UTC, datetime

from core.emails import email_canonical, email_checked
from core.errors import InvalidInput
from drops import line
from drops.errors import LineClosed, LinePaused
from drops.rules import LineState, poll_after, wait_estimate


@dataclass(frozen=True)
class Told:
    """A place as its buyer sees it. ``state``: ``waiting``, ``admitted``, ``refused``, or the line's
    ``sold_out`` / ``closed`` for a buyer still waiting; ``poll``: seconds until the page asks again."""

    drop_id: int
    name: str
    ticket: int
    state: str
    ahead: int
    sku: str
    variant: str
    quantity: int
    units: str
    estimate_seconds: int | None
    poll: int
    order: str = ""
    until: datetime | None = None
    code: str = ""

    def as_dict(self) -> dict:
        return {
            "drop": self.drop_id,
            "ticket": self.ticket,
            "state": self.state,
            "ahead": self.ahead,
            "sku": self.sku,
            "quantity": self.quantity,
            "units": self.units,
            "estimate_seconds": self.estimate_seconds,
            "poll_seconds": self.poll,
            "order": self.order or None,
            "held_until": self.until.isoformat() if self.until else None,
            "code": self.code or None,
        }


def news_current(*, drop_id: int) -> dict | None:
    """The drop's news, or None before its runner first passed; ``LinePaused`` if it cannot be trusted."""
    try:
        found = line.news(drop_id=drop_id)
    except line.LINE_DOWN as exc:
        raise LinePaused() from exc
    if found is not None and found["age_ms"] > line.NEWS_STALE_MS:
        raise LinePaused()
    return found


def line_enter(*, drop_id: int, sku: str, quantity, customer_id: int | None, email: str, ticket: int | None):
    """The buyer's place, joining if they have none: (``Told``, whether it is new). ``ticket``: the place
    their pass names already (a second tab, a double click), kept if the line knows it."""
    news = news_current(drop_id=drop_id)
    if ticket is not None and (told := place_told(drop_id=drop_id, ticket=ticket, news=news)) is not None:
        return told, False
    if news is None or news["state"] not in (LineState.OPEN, LineState.SOLD_OUT):
        raise LineClosed(reason=news["state"] if news else LineState.NOT_OPEN, opens_at=(news or {}).get("opens_at"))
    variant = next((vid for vid, v in news["variants"].items() if v["sku"] == sku), None)
    if variant is None:
        raise InvalidInput(fields={"sku": "Choose one of the drop's products."})
    most = news["units_per_buyer"]
    if isinstance(quantity, bool) or not isinstance(quantity, int) or not 1 <= quantity <= most:
        raise InvalidInput(fields={"quantity": f"Choose 1 to {most}."})
    identities = []
    if customer_id is not None:
        identities.append(f"u:{int(customer_id)}")
    if email:
        identities.append(f"e:{email_canonical(email_checked(email))}")
    if not identities:
        raise InvalidInput(fields={"email": "Give an email address, or log in."})
    try:
        new, outcome = line.line_join(
            drop_id=drop_id,
            identities=identities,
            variant_id=int(variant),
            quantity=quantity,
            customer_id=customer_id,
            email=email if customer_id is None else "",
        )
    except line.LINE_DOWN as exc:
        raise LinePaused() from exc
    if not new:
        raise LineClosed(reason=outcome)
    return place_told(drop_id=drop_id, ticket=new, news=news), outcome == "new"


def place_told(*, drop_id: int, ticket: int, news: dict | None = None) -> Told | None:
    """Where the place ``ticket`` stands, or None if the line has no such place."""
    news = news if news is not None else news_current(drop_id=drop_id)
    try:
        place = line.line_status(drop_id=drop_id, ticket=ticket)
    except line.LINE_DOWN as exc:
        raise LinePaused() from exc
    if place is None or news is None:
        return None
    variant = news["variants"].get(str(place.variant_id), {"sku": "", "name": "", "units": "sold_out"})
    state, estimate = {line.State.ADMITTED: "admitted", line.State.REFUSED: "refused"}.get(place.state, "waiting"), None
    if state == "waiting":
        if news["state"] in (LineState.SOLD_OUT, LineState.CLOSED):
            state = news["state"]
        else:
            estimate = wait_estimate(ahead=place.ahead + 1, rate=news.get("rate") or 0)
    until = datetime.fromtimestamp(place.until_ms / 1000, tz=UTC) if place.until_ms else None
    return Told(
        drop_id=drop_id,
        name=news.get("name", ""),
        ticket=ticket,
        state=state,
        ahead=place.ahead,
        sku=variant["sku"],
        variant=variant["name"],
        quantity=place.quantity,
        units=variant["units"],
        estimate_seconds=estimate,
        poll=poll_after(estimate, window=news.get("window", 600)) if state in ("waiting", "sold_out") else 0,
        order=place.order,
        until=until,
        code=place.code,
    )
