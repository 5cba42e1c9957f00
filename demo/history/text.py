"""Row text for LOAD DATA: fields, amounts, and times on the history's clock."""

import time
from datetime import UTC, datetime
from decimal import Decimal

SECOND = 1_000_000  # the history's clock counts microseconds since the epoch
DAY = 86_400 * SECOND
HISTORY_DAYS = 365
_CLOCK = [f"{hour:02d}:{minute:02d}:{second:02d}" for hour in range(24) for minute in range(60) for second in range(60)]


def field_text(value) -> str:
    """``value`` as a field of LOAD DATA's text (tab-separated, backslash escapes, ``\\N`` for NULL)."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | Decimal):
        return str(value)
    escapes = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0"}
    return "".join(escapes.get(character, character) for character in str(value))


def money(in_cents: int) -> str:
    return f"{in_cents // 100}.{in_cents % 100:02d}"


def cents(amount: Decimal) -> int:
    return int(amount * 100)


class Stamps:
    """A time on the history's clock as LOAD DATA's DATETIME(6) text, in UTC (as Django stores them)."""

    def __init__(self):
        self._days: dict[int, str] = {}

    def __call__(self, micros: int) -> str:
        day, micros = divmod(micros, DAY)
        if (date := self._days.get(day)) is None:
            date = self._days[day] = datetime.fromtimestamp(day * 86_400, UTC).strftime("%Y-%m-%d ")
        seconds, micros = divmod(micros, SECOND)
        return f"{date}{_CLOCK[seconds]}.{micros:06d}"


def clock_now() -> int:
    return time.time_ns() // 1000
