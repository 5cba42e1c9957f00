"""A drop's line, in Redis only: places in arrival order, claimed for admission at a bounded rate.

Each step is one Lua script (``drops/scripts``), so two web processes never give out one place twice:

- ``line_join`` gives a buyer a place (a ticket: its arrival number) in the queue of the variant they
  chose, once per identity (an account, a canonical email): joining again answers the same place.
- ``line_status`` reads a place: its state, how many wait ahead of it for its variant, and the news.
- ``line_claim`` takes the heads of the queues, in arrival order across variants, for the units free now
  and at most the admission rate allows (a token bucket); claims left unfinished by a killed process
  come back after ``CLAIM_STALE_MS`` to be finished by the next pass.
- ``line_settle`` ends a claim: admitted (with its order), back in line at its own place (no unit after
  all), or refused (with the refusal's code), and publishes the place's change. A claim settled twice
  is settled once.
- ``news_publish`` keeps the news every waiting buyer reads (``news``) and publishes it when it changes.

The database never sees a waiting buyer: ``orders.services.holding`` places the hold of each claim.
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.cache import caches
from django_redis.exceptions import ConnectionInterrupted
from redis.exceptions import RedisError

# A claim not settled within this long was left by a process that died: the next pass finishes it.
CLAIM_STALE_MS = 30_000
NEWS_MINOR_EVERY_MS = 2_000  # every drop's news, published as it changes (``drops.push`` relays it)
# News no runner pass confirmed for this long: the runner is down, and the line is paused as if Redis were.
NEWS_STALE_MS = 10_000
# What a call raises when Redis cannot be reached: the line is paused; every place is kept.
LINE_DOWN = (RedisError, ConnectionInterrupted, OSError)

_SCRIPTS = Path(__file__).parent / "scripts"


class State:
    """A place's state in Redis, and the line's."""

    WAITING, CLAIMED, ADMITTED, REFUSED = "w", "c", "a", "r"


@dataclass(frozen=True)
class Claim:
    """A place taken for admission: who holds it and what to hold for them."""

    ticket: int
    variant_id: int
    quantity: int
    customer_id: int | None
    email: str
    replay: bool  # claimed before by a process that never settled it


@dataclass(frozen=True)
class Place:
    """A place as its buyer is told it; ``ahead`` counts the places before it for the same variant."""

    ticket: int
    state: str
    variant_id: int
    ahead: int
    quantity: int = 1
    order: str = ""
    code: str = ""
    until_ms: int = 0  # when an admitted place's hold lapses


def _client():
    client = caches[settings.LOCK_CACHE_ALIAS].client
    return client.get_client(write=True), client.make_key


_registered = {}


def _script(name: str):
    redis, _ = _client()
    key = (id(redis), name)
    if key not in _registered:
        _registered[key] = redis.register_script((_SCRIPTS / f"{name}.lua").read_text())
    return _registered[key]


def _base(drop_id: int) -> str:
    return _client()[1](f"drop:{int(drop_id)}")


def news_channel() -> str:
    """The channel the lines' news is published on: Pub/Sub spans a server's databases, so it names the
    shop's key prefix and database (two shops, or test runs, on one server never hear each other)."""
    redis, make_key = _client()
    return f"{make_key('drops:news')}:{redis.connection_pool.connection_kwargs.get('db', 0)}"


def _now_ms() -> int:
    return int(time.time() * 1000)


def line_join(*, drop_id: int, identities: list[str], variant_id: int, quantity: int, customer_id, email: str):
    """The buyer's ticket and whether it is new; (0, reason) when the line takes no one now
    (``not_open``, ``closed``, ``unknown_variant``: the news says why)."""
    ticket, outcome = _script("line_join")(
        args=[_base(drop_id), variant_id, quantity, customer_id or "", email, _now_ms(), *identities]
    )
    return int(ticket), outcome.decode()


def line_status(*, drop_id: int, ticket: int) -> Place | None:
    """The place of ``ticket``, or None if the line has no such ticket."""
    found = _script("line_status")(args=[_base(drop_id), ticket])
    if not found:
        return None
    state, variant_id, ahead, order, code, until, quantity = found
    return Place(
        ticket, state.decode(), int(variant_id), int(ahead), int(quantity), order.decode(), code.decode(), int(until)
    )


def line_claim(*, drop_id: int, free: dict[int, int], rate: float, burst: int) -> list[Claim]:
    """Claim the heads of the line for the units ``free`` now (variant id: units), oldest ticket first."""
    pairs = [value for variant_id, units in sorted(free.items()) for value in (variant_id, units)]
    rows = _script("line_claim")(args=[_base(drop_id), _now_ms(), rate, burst, CLAIM_STALE_MS, *pairs])
    return [
        Claim(
            int(ticket), int(variant), int(quantity), int(customer) if customer else None, email.decode(), replay == 1
        )
        for ticket, variant, quantity, customer, email, replay in rows
    ]


def line_settle(*, drop_id: int, ticket: int, outcome: str, order: str = "", code: str = "", until_ms: int = 0) -> bool:
    """End the claim of ``ticket``: ``admitted`` (``order``, held until ``until_ms``), ``back`` in line, or
    ``refused`` (``code``), and publish that the place changed. False if it was settled already."""
    args = [_base(drop_id), int(ticket), outcome, order, code, until_ms, news_channel(), int(drop_id)]
    return bool(_script("line_settle")(args=args))


def line_admitted(*, drop_id: int) -> list[int]:
    """The tickets admitted, in the order the line took them (their claims'; holds are placed after)."""
    redis, _ = _client()
    return [int(ticket) for ticket in redis.zrange(f"{_base(drop_id)}:admitted", 0, -1)]


def news_publish(*, drop_id: int, news: dict, major: dict) -> bool:
    """Keep the line's news and publish it if it changed: at once when ``major`` (what every buyer must
    learn fast: the state, the units) changed, else at most every ``NEWS_MINOR_EVERY_MS``. True if it did."""
    body = json.dumps(news, sort_keys=True, separators=(",", ":"))
    major = json.dumps(major, sort_keys=True, separators=(",", ":"))
    args = [_base(drop_id), body, news_channel(), drop_id, _now_ms(), major, NEWS_MINOR_EVERY_MS]
    return bool(_script("news_publish")(args=args))


def news(*, drop_id: int) -> dict | None:
    """The line's news as last published, with ``age_ms`` (how long ago a pass confirmed it), or None."""
    redis, _ = _client()
    body, at = redis.hmget(f"{_base(drop_id)}:news", "body", "at")
    if body is None:
        return None
    return json.loads(body) | {"age_ms": max(0, _now_ms() - int(at))}


def line_forget(*, drop_id: int) -> None:
    """Remove a drop's line from Redis (staff turned the line off; tests)."""
    redis, _ = _client()
    keys = list(redis.scan_iter(match=f"{_base(drop_id)}:*", count=1000))
    for start in range(0, len(keys), 500):
        redis.delete(*keys[start : start + 500])
