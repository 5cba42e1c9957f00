"""News of the drops' lines pushed to waiting browsers: server-sent events from one ASGI process, beside
the WSGI app servers, subscribed to Redis (``drops.line.news_channel``).

One subscription per process fans each publication out to every connection waiting on that drop, so a
crowd costs one Redis message and one small write per connection per change (sold out, units back, the
line closed), and nothing between changes but a comment every ``HEARTBEAT_SECONDS``. Run it with
``uvicorn config.push:app`` (``bin/run`` starts it); the pages reach it at ``DROP_EVENTS_URL``. Raw ASGI,
no framework: it serves one kind of stream.
"""

import asyncio
import json
import logging
import re

import redis.asyncio as aioredis
from django.conf import settings

from drops.line import news_channel
from drops.rules import LineState

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 15  # keeps proxies from closing an idle stream
_PATH = re.compile(r"^/events/drops/(\d+)/$")
_waiting: dict[int, set[asyncio.Queue]] = {}
_relay: asyncio.Task | None = None


def _redis() -> aioredis.Redis:
    """The locks' Redis, where the line's news is published (a Sentinel's primary under Sentinel)."""
    if settings.REDIS_SENTINELS:
        from redis.asyncio.sentinel import Sentinel

        return Sentinel(settings.REDIS_SENTINELS).master_for(settings.REDIS_SENTINEL_MASTER)
    return aioredis.from_url(settings.CACHES[settings.LOCK_CACHE_ALIAS]["LOCATION"])


async def _relay_news() -> None:
    """Forward every publication to the connections waiting on its drop; reconnect when Redis comes back."""
    while True:
        try:
            pubsub = _redis().pubsub()
            await pubsub.subscribe(await asyncio.to_thread(news_channel))
            async for message in pubsub.listen():
                if message["type"] != "message":
                    continue
                published = json.loads(message["data"])
                news = json.dumps(published["news"], separators=(",", ":"))
                for queue in list(_waiting.get(published["drop"], ())):
                    if queue.full():  # a slow client gets the latest news, never a backlog
                        queue.get_nowait()
                    queue.put_nowait(news)
        except (OSError, aioredis.RedisError) as exc:
            logger.warning("drop news relay: Redis unreachable (%s); retrying", exc)
            for queues in _waiting.values():  # the pages show the pause from their own next read
                for queue in queues:
                    if not queue.full():
                        queue.put_nowait(json.dumps({"state": LineState.PAUSED}))
            await asyncio.sleep(1)


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    match = _PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
    if match is None or scope["method"] != "GET":
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"Not found."})
        return
    await _stream(int(match[1]), receive, send)


async def _stream(drop_id: int, receive, send) -> None:
    global _relay
    if _relay is None or _relay.done():
        _relay = asyncio.create_task(_relay_news())
    queue: asyncio.Queue = asyncio.Queue(maxsize=1)
    _waiting.setdefault(drop_id, set()).add(queue)
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store"), (b"x-accel-buffering", b"no")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    disconnected = asyncio.create_task(_disconnect(receive))
    try:
        await send({"type": "http.response.body", "body": b"retry: 5000\n\n", "more_body": True})
        while not disconnected.done():
            news = asyncio.create_task(queue.get())
            done, _ = await asyncio.wait({news, disconnected}, timeout=HEARTBEAT_SECONDS, return_when="FIRST_COMPLETED")
            if news in done:
                body = f"data: {news.result()}\n\n".encode()
            else:
                news.cancel()
                body = b": still here\n\n"
            if not disconnected.done():
                await send({"type": "http.response.body", "body": body, "more_body": True})
    finally:
        _waiting[drop_id].discard(queue)
        disconnected.cancel()


async def _disconnect(receive) -> None:
    """Returns when the buyer leaves (after the request's own empty body)."""
    while (await receive())["type"] != "http.disconnect":
        pass
