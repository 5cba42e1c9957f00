"""The lines pushed to waiting buyers: server-sent events from one ASGI process, beside the WSGI app
servers, subscribed to Redis (``drops.line.news_channel``).

A stream, ``GET /events/drops/<id>/``, carries the drop's news whenever what matters in it changes (sold
out, units back, the line closed: not the queue moving) and, when the request names a place by its
pass (``X-Drop-Pass``, ``?pass=``, or the page's cookie), that place: at once, and again each time the
runner settles it (``event: place``: admitted with its order, refused, back in line;
``drops.line.line_settle`` publishes it). So a buyer far
back in the line sends no request while waiting, and still learns their admission within a pass.

One subscription per process fans each publication out to the streams it concerns: a crowd costs one
Redis message and one small write per stream per change, and nothing between changes but a comment
every ``HEARTBEAT_SECONDS``. Raw ASGI, no framework (``config.push`` routes to it).
"""

import asyncio
import functools
import json
import logging
import re
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import redis.asyncio as aioredis
from django.conf import settings
from django.http.cookie import parse_cookie
from django.http.request import validate_host

from drops import passes
from drops.errors import LinePaused
from drops.line import news_channel
from drops.rules import LineState
from drops.waiting import place_told

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15  # keeps proxies from closing an idle stream
FIRST = asyncio.FIRST_COMPLETED
PATH = re.compile(r"^/events/drops/(\d+)/$")
_PAUSED = json.dumps({"state": LineState.PAUSED})


class _Stream:
    """One buyer's open stream: what it has yet to send, and the event that wakes it."""

    __slots__ = ("ticket", "news", "place_changed", "woken")

    def __init__(self, ticket: int | None):
        self.ticket, self.news, self.place_changed = ticket, None, ticket is not None
        self.woken = asyncio.Event()

    def wake(self, *, news: str | None = None, place: bool = False) -> None:
        self.news = news if news is not None else self.news  # only the latest news: never a backlog
        self.place_changed = self.place_changed or place
        self.woken.set()


# One thread runs the synchronous service calls (a join, a place read): each is CPU in this process and a
# round trip or two to Redis and the database, so more threads only contend for the interpreter with the
# streams' event loop (figures: docs/drop-absorbed.md).
_SERVICE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drops-service")


async def in_service(call, /, *args, **kwargs):
    """``call(*args, **kwargs)`` in the service thread, in the order asked."""
    return await asyncio.get_running_loop().run_in_executor(_SERVICE, functools.partial(call, *args, **kwargs))


_streams: dict[int, set[_Stream]] = {}  # by drop
_places: dict[tuple[int, int], set[_Stream]] = {}  # by (drop, ticket): a buyer's tabs
_majors: dict[int, tuple] = {}  # by drop: what of its news the streams heard last
_relay: asyncio.Task | None = None


def _major(news: dict) -> tuple:
    """What of the news every waiting buyer must hear: the line's state and each product's units."""
    return news.get("state"), tuple(sorted((vid, v.get("units")) for vid, v in news.get("variants", {}).items()))


def _redis() -> aioredis.Redis:
    """The locks' Redis, where the lines publish (a Sentinel's primary under Sentinel)."""
    if settings.REDIS_SENTINELS:
        from redis.asyncio.sentinel import Sentinel

        return Sentinel(settings.REDIS_SENTINELS).master_for(settings.REDIS_SENTINEL_MASTER)
    return aioredis.from_url(settings.CACHES[settings.LOCK_CACHE_ALIAS]["LOCATION"])


async def _relay_news() -> None:
    """Wake the streams each publication concerns; reconnect when Redis comes back."""
    while True:
        try:
            pubsub = _redis().pubsub()
            await pubsub.subscribe(await asyncio.to_thread(news_channel))
            async for message in pubsub.listen():
                if message["type"] != "message":
                    continue
                published = json.loads(message["data"])
                if "news" in published:
                    if _major(published["news"]) == _majors.get(published["drop"]):
                        continue  # the queue moved, the rate changed: nothing a waiting buyer acts on
                    _majors[published["drop"]] = _major(published["news"])
                    news = json.dumps(published["news"], separators=(",", ":"))
                    for stream in list(_streams.get(published["drop"], ())):
                        stream.wake(news=news)
                else:
                    for stream in list(_places.get((published["drop"], published["ticket"]), ())):
                        stream.wake(place=True)
        except (OSError, aioredis.RedisError) as exc:
            logger.warning("drop news relay: Redis unreachable (%s); retrying", exc)
            _majors.clear()
            for streams in _streams.values():  # the pages show the pause; their places are read again after
                for stream in streams:
                    stream.wake(news=_PAUSED, place=True)
            await asyncio.sleep(1)


def request_pass(scope, drop_id: int) -> int | None:
    """The ticket the request's pass names: the API's header, the query's ``pass``, else the page's cookie."""
    headers = dict(scope["headers"])
    token = headers.get(passes.HEADER.lower().encode(), b"").decode("latin-1")
    token = token or urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1")).get("pass", [""])[0]
    if not token:
        token = parse_cookie(headers.get(b"cookie", b"").decode("latin-1")).get(passes.cookie_name(drop_id), "")
    return passes.pass_ticket(token, drop_id=drop_id)


def _cors(scope) -> list[tuple[bytes, bytes]]:
    """Lets the shop's own pages (a host it serves, on another port: ``bin/run``) read the stream with the
    pass cookie; any other origin reads nothing."""
    origin = dict(scope["headers"]).get(b"origin", b"").decode("latin-1")
    host = urllib.parse.urlsplit(origin).hostname or ""
    if not origin or not validate_host(host, settings.ALLOWED_HOSTS):
        return []
    return [(b"access-control-allow-origin", origin.encode()), (b"access-control-allow-credentials", b"true")]


async def _place_event(drop_id: int, ticket: int) -> bytes:
    try:
        told = await in_service(place_told, drop_id=drop_id, ticket=ticket)
    except LinePaused:
        return f"data: {_PAUSED}\n\n".encode()
    if told is None:
        return b""
    return f"event: place\ndata: {json.dumps(told.as_dict(), separators=(',', ':'))}\n\n".encode()


async def stream(scope, receive, send, drop_id: int) -> None:
    """The stream of drop ``drop_id``'s news, and of the place the request's pass names."""
    global _relay
    if _relay is None or _relay.done():
        _relay = asyncio.create_task(_relay_news())
    me = _Stream(request_pass(scope, drop_id))
    _streams.setdefault(drop_id, set()).add(me)
    if me.ticket is not None:
        _places.setdefault((drop_id, me.ticket), set()).add(me)
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store"), (b"vary", b"origin")]
    headers += [(b"x-accel-buffering", b"no"), *_cors(scope)]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    disconnected = asyncio.create_task(client_left(receive))
    try:
        await send({"type": "http.response.body", "body": b"retry: 5000\n\n", "more_body": True})
        while not disconnected.done():
            me.woken.clear()
            body = b""
            if me.place_changed:
                me.place_changed = False
                body += await _place_event(drop_id, me.ticket)
            if me.news is not None:
                body, me.news = body + f"data: {me.news}\n\n".encode(), None
            if body and not disconnected.done():
                await send({"type": "http.response.body", "body": body, "more_body": True})
            woken = asyncio.create_task(me.woken.wait())
            done, _ = await asyncio.wait({woken, disconnected}, timeout=HEARTBEAT_SECONDS, return_when=FIRST)
            if not done and not disconnected.done():
                await send({"type": "http.response.body", "body": b": still here\n\n", "more_body": True})
            woken.cancel()
    finally:
        _streams[drop_id].discard(me)
        if me.ticket is not None:
            _places[(drop_id, me.ticket)].discard(me)
            if not _places[(drop_id, me.ticket)]:
                del _places[(drop_id, me.ticket)]
        disconnected.cancel()


async def client_left(receive) -> None:
    """Returns when the buyer leaves (after the request's own empty body)."""
    while (await receive())["type"] != "http.disconnect":
        pass
