"""What a log line is about, for operators' tools: the request it served, the order and SKU it names.

With ``LOG_FORMAT=json`` each record is one JSON object per line (python-json-logger): ``time``, ``level``,
``logger``, ``message``, and the fields ``LogContextFilter`` adds: ``request_id`` (the request being
served: its ``X-Request-ID`` from the proxy, else one made here, answered in the same header), ``order``
when the record's arguments hold an order, and ``sku`` (or ``skus``) when they hold a variant or the
record is written inside a stock section (``inventory.section``).
"""

import contextvars
import logging
import re
import uuid

request_id = contextvars.ContextVar("request_id", default="")
section_skus: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("section_skus", default=())

_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def request_id_middleware(get_response):
    """Name each request, so every line it logs can be found together (``X-Request-ID`` in and out)."""

    def middleware(request):
        given = request.headers.get("X-Request-ID", "")
        token = request_id.set(given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex)
        try:
            response = get_response(request)
            response["X-Request-ID"] = request_id.get()
            return response
        finally:
            request_id.reset(token)

    return middleware


class LogContextFilter(logging.Filter):
    """Adds ``request_id``, and ``order``, ``sku`` or ``skus`` where the record has one, to each record.

    Arguments are read from their instance dictionaries only, so a log line never loads a field from
    the database."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            fields = getattr(arg, "__dict__", None) or {}
            if "order" not in record.__dict__ and type(arg).__name__ == "Order" and "number" in fields:
                record.order = fields["number"]
            if "sku" not in record.__dict__ and isinstance(fields.get("sku"), str):
                record.sku = fields["sku"]
        skus = section_skus.get()
        if "sku" not in record.__dict__ and len(skus) == 1:
            record.sku = skus[0]
        elif "sku" not in record.__dict__ and skus:
            record.skus = list(skus)
        return True
