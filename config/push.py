"""The drops' push process, ``uvicorn config.push:app``: where a crowd meets a drop's line without
Django's request cycle.

- ``GET /events/drops/<id>/``: the line's news, and the buyer's own place, as server-sent events
  (``drops.push``).
- ``POST`` and ``GET /api/drops/<id>/line/``: the API's join and place read, the same answers as the
  WSGI app's view gives (``drops.apis.line_join_answer``, ``line_place_answer``; the OpenAPI schema
  documents them there). A proxy in front of the shop routes these paths here for a drop (docs/drop.md):
  a join costs a Redis script and, for its token, one database read, not the app server's middleware.
  Joining here takes an API token only (``Authorization: Token``); a browser's session joins through
  the pages.
Raw ASGI, no framework; the service calls are synchronous Django and run in
one thread beside the event loop (``drops.push.in_service``).
"""

import asyncio
import json
import os
import re
from types import SimpleNamespace

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from django.core.serializers.json import DjangoJSONEncoder  # noqa: E402  (after django.setup())
from django.db import close_old_connections  # noqa: E402
from rest_framework import exceptions  # noqa: E402

from config.api import exception_handler  # noqa: E402
from core.tokens import token_account_id  # noqa: E402
from drops import passes, push  # noqa: E402
from drops.apis import line_join_answer, line_place_answer  # noqa: E402

_LINE = re.compile(r"^/api/drops/(\d+)/line/$")
BODY_MAX_BYTES = 4096  # a join's body is a SKU and a quantity


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        return
    path, method = scope["path"], scope["method"]
    if (found := push.PATH.match(path)) and method == "GET":
        return await push.stream(scope, receive, send, int(found[1]))
    if (found := _LINE.match(path)) and method in ("GET", "POST"):
        body = await _body(receive) if method == "POST" else b""
        gone = asyncio.Event()  # the client left (it gave up waiting): its request is not served after all
        watching = asyncio.create_task(_left(receive, gone))
        try:
            answer = await push.in_service(_line_unless_gone, gone, int(found[1]), method, dict(scope["headers"]), body)
        finally:
            watching.cancel()
        return await _respond(send, *answer) if answer else None
    await _respond(send, 404, {"code": "not_found", "detail": "Not found.", "fields": {}}, {})


async def _body(receive) -> bytes | None:
    """The request's body, or None past ``BODY_MAX_BYTES``."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > BODY_MAX_BYTES:
            return None
        if not message.get("more_body"):
            return body


async def _left(receive, gone: asyncio.Event) -> None:
    await push.client_left(receive)
    gone.set()


def _line_unless_gone(gone: asyncio.Event, *args):
    """``_line``, unless its client left while it queued: under a crowd a request that waited past the
    client's patience is sent again, and serving both would double the work of the slowest moment."""
    return None if gone.is_set() else _line(*args)


def _line(drop_id: int, method: str, headers: dict, body: bytes | None) -> tuple[int, dict, dict]:
    """The line API's answer (status, body, headers), refusals in the API's one shape."""
    close_old_connections()  # a connection the database dropped is opened again, as a request would
    ticket = passes.pass_ticket(headers.get(passes.HEADER.lower().encode(), b"").decode("latin-1"), drop_id=drop_id)
    try:
        if method == "GET":
            answer = line_place_answer(drop_id=drop_id, ticket=ticket)
        else:
            customer_id = _account(headers.get(b"authorization", b""))
            answer = line_join_answer(drop_id=drop_id, data=_json(body), customer_id=customer_id, ticket=ticket)
    except Exception as exc:  # the API's handler renders it, or it is a 500 uvicorn logs
        answer = exception_handler(exc, {"request": SimpleNamespace(path=f"/api/drops/{drop_id}/line/")})
        if answer is None:
            raise
        if answer.status_code == 401:
            answer["WWW-Authenticate"] = "Token"
    return answer.status_code, answer.data, {name: value for name, value in answer.items() if name == "Retry-After"}


def _account(authorization: bytes) -> int:
    """The id of the account whose API token ``authorization`` carries (one database read)."""
    scheme, _, token = authorization.partition(b" ")
    if scheme.lower() != b"token" or not token.strip():
        raise exceptions.NotAuthenticated()
    return token_account_id(token.strip())


def _json(body: bytes | None):
    if body is None:
        raise exceptions.ParseError(f"The body is over {BODY_MAX_BYTES} bytes.")
    try:
        return json.loads(body or b"{}")
    except ValueError as exc:
        raise exceptions.ParseError("Malformed JSON.") from exc


async def _respond(send, status: int, body: dict, headers: dict) -> None:
    raw = json.dumps(body, cls=DjangoJSONEncoder).encode()
    extra = [(name.lower().encode(), str(value).encode()) for name, value in headers.items()]
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": raw})
