"""The rules of a drop's line that see one drop: its state, what its buyers are told, how long they wait."""

import math
from datetime import datetime

# At most this many units left is "few": the exact figure is not shown while a crowd waits.
FEW_UNITS = 10
# A waiting page asks again after its estimate, within these bounds: the near ones soon, the far back rarely.
POLL_MIN_SECONDS, POLL_MAX_SECONDS = 2, 60


class LineState:
    """What a line does now, as its news says it."""

    NOT_OPEN = "not_open"  # before ``line_opens_at``: no one can join yet
    OPEN = "open"  # buyers join; the heads are admitted while units are free (from ``sale_starts_at``)
    SOLD_OUT = "sold_out"  # every unit is held or sold; held ones may come back, so the line waits for them
    CLOSED = "closed"  # every unit is sold and nothing is held: nothing can come back
    PAUSED = "paused"  # Redis, which keeps the line, is down: no one is admitted, no place is lost


def line_state(*, opens_at: datetime, now: datetime, free: int, held: int, selling: bool) -> str:
    """The line's state from its units: ``free`` (on hand, not reserved), ``held`` (reserved by unpaid
    orders, which may come back), and whether the sale has started (``selling``)."""
    if now < opens_at:
        return LineState.NOT_OPEN
    if free > 0 or not selling:
        return LineState.OPEN
    return LineState.SOLD_OUT if held > 0 else LineState.CLOSED


def units_shown(units: int) -> str:
    """Units left as the crowd sees them: ``plenty``, ``few`` or ``sold_out``."""
    if units <= 0:
        return "sold_out"
    return "few" if units <= FEW_UNITS else "plenty"


def wait_estimate(*, ahead: int, rate: float) -> int | None:
    """Seconds until ``ahead`` buyers are admitted at ``rate`` a second (measured), or None if no one is
    admitted now (the rate is 0: before the sale, or sold out)."""
    return math.ceil(ahead / rate) if rate > 0 else None


def poll_after(estimate: int | None, *, window: int) -> int:
    """When a waiting page asks again: at half its estimate, within the bounds, and at least three times
    within the checkout ``window`` (an admission is news for one buyer only: their own read tells them,
    before their hold lapses); news for everyone reaches it sooner by push or the shared news."""
    most = max(POLL_MIN_SECONDS, min(POLL_MAX_SECONDS, window // 3))
    if estimate is None:
        return min(most, POLL_MAX_SECONDS // 4)
    return max(POLL_MIN_SECONDS, min(most, estimate // 2))
