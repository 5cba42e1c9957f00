"""What the stock locks keep in Redis and send through it: key names, wake-up messages, requests, answers.

Keys. A SKU's lock is ``lock_key(sku)`` under the ``locks`` cache's key prefix; the Lua scripts in
``scripts/`` name every other key of a lock ``<lock>`` after it (so one Redis, not a Cluster):

    <lock>                  the holder's token; its TTL is the lease, or the claim of a hand-off
    <lock>:queue            the waiters, first come first served, as entries ``<deadline ms>:<token>``
    <lock>:entry:<token>    the entry a waiter queued with
    <lock>:req:<token>      the request a waiter left with its place in the queue: ``<tag><body>``
    <lock>:served:<token>   present once a holder took that waiter's request to serve it
    <lock>:wake:<token>     the waiter's wake-up list, which it blocks on (BLPOP)
    <lock>:soldout          the SKU's sold-out mark, with a TTL (``soldout``): a buyer asking to be
                            refused while it is set (``acquire``) is, without queueing

Wake-up messages. Pushed to a waiter's wake-up list; the first byte says what happened:

    L<fields>               ``LOCKED``: we hold the lock (the acquire script wakes us itself). The
                            fields are our entry, then waiter, request, ... for each request we took
                            to serve, each packed as ``<length>:<bytes>`` (binary safe).
    H<queued>:<entry>       ``HANDED_OVER``: a release handed us the lock on a claim; ``<queued>``
                            waiters were queued behind us then (our batch is cut there).
    R<answer>               ``ANSWERED``: a holder served our request, and this is its answer.
    S                       ``SOLD_OUT``: the lock's sold-out mark is set; we did not queue (the
                            acquire script wakes us itself).

Lock states. The acquire and abandon scripts answer where a waiter stands with a number, which
``LockState`` names for the Python side.

Requests and answers. A queued buyer leaves its request in Redis and the lock holder leaves its answer
there. Both are JSON decoded against an explicit type (msgspec), so whatever anyone writes into Redis
is only ever data: a value that does not fit its type is refused (``Malformed``), never run, as an
unpickled one would be.

Versions. ``WIRE_VERSION`` names the shape of every request and answer: change any of them (a field
of a ``Batch``'s request or result type, or of a type they hold) and bump it. A request starts with
its tag, ``v<WIRE_VERSION>:<kind>`` (``request_tag``), and a holder takes only requests with its own
tag (the acquire script matches it), so in a rolling upgrade no holder meets a request of another
version: its buyer keeps its place in the queue and, handed the lock, serves those of its own. The
requests of code from before versions start with their bare ``<kind>``: neither takes the other's.
An answer goes only to a request the holder took, so code of the same version reads it. The request
types forbid unknown fields as well: a request whose tag matched but that the holder cannot read
whole (a bump forgotten) is answered ``RunAlone``, never served half. A request type may also refuse
values its code does not know as it is decoded, and such a request is handed back the same way: the
buyer fields of ``orders.services.placing_wire.PlaceRequest`` travel by name, so adding one needs no
bump, and a holder on older code leaves an order that gives it to its buyer.
"""

from enum import IntEnum
from typing import Any

import msgspec

from core.errors import DomainError

# --- Keys ------------------------------------------------------------------------------------------


def lock_key(sku: str) -> str:
    """The key of a SKU's lock (before the cache's key prefix)."""
    return f"stock-lock:{sku}"


def sold_out_key(lock: str) -> str:
    """The key of the sold-out mark (``soldout``) of the SKU whose lock is ``lock``."""
    return f"{lock}:soldout"


def queue_key(lock: str) -> str:
    return f"{lock}:queue"


def request_key(lock: str, token: bytes) -> str:
    return f"{lock}:req:{token.decode()}"


def wake_key(lock: str, token: bytes) -> str:
    return f"{lock}:wake:{token.decode()}"


# --- Wake-up messages ------------------------------------------------------------------------------

LOCKED, HANDED_OVER, ANSWERED, SOLD_OUT = b"L", b"H", b"R", b"S"  # the kinds of wake-up message: ``message[:1]``


def locked_decode(message: bytes) -> list[bytes]:
    """A ``LOCKED`` message's fields: our entry, then waiter, request, ... for the requests we took."""
    fields, at = [], 1
    while at < len(message):
        colon = message.index(b":", at)
        end = colon + 1 + int(message[at:colon])
        fields.append(message[colon + 1 : end])
        at = end
    return fields


def handed_over_decode(message: bytes) -> tuple[int, bytes]:
    """A ``HANDED_OVER`` message's count of waiters queued behind us at the hand-off, and our entry."""
    queued, entry = message[1:].split(b":", 1)
    return int(queued), entry


def answered_decode(message: bytes) -> bytes:
    """An ``ANSWERED`` message's answer (``answer_decode`` reads it)."""
    return message[1:]


# --- Lock states -----------------------------------------------------------------------------------


class LockState(IntEnum):
    """Where a waiter stands, as ``acquire.lua`` (the first item of its result) and ``abandon.lua`` answer.

    The scripts keep the numbers; Python compares only these names.
    """

    WAITING = 0  # queued for the lock (abandon: left the queue, holding nothing)
    HELD = 1  # we hold the lock
    SERVED = 2  # a holder took our request to serve it: its answer is coming
    SOLD_OUT = 3  # not queued: the SKU is marked sold out (acquire with ``refuse_sold_out``)


# --- Requests and answers --------------------------------------------------------------------------

WIRE_VERSION = 3  # the shape of the requests and answers: bump it with any change to them


def request_tag(kind: str) -> bytes:
    """What a request of ``kind`` starts with in Redis, and what a holder takes requests by. It starts
    no request of another version (``v1:`` is not ``v12:``), nor an untagged one."""
    return f"v{WIRE_VERSION}:{kind}".encode()


class Malformed(ValueError):
    """A request or answer that does not fit its type. The caller acts on none of it (a holder hands such a
    request back, ``RunAlone``) and logs it."""


class RunAlone(msgspec.Struct, tag="run_alone"):
    """Nothing was done for the request: the holder's batch failed before its commit, or the holder could
    not read the request (``Malformed``). Carry it out alone."""


class Unknown(msgspec.Struct, tag="unknown"):
    """The holder committed, or may have, and cannot say what came of the request: look it up."""


class _Result(msgspec.Struct, tag="result"):
    value: msgspec.Raw  # decoded against the request kind's result type


class _Refusal(msgspec.Struct, tag="refusal"):
    code: str
    detail: str
    payload: dict[str, Any]


_encoder = msgspec.json.Encoder()


def encode(value) -> bytes:
    """``value`` (a msgspec Struct, a dataclass, or plain lists, dicts, strings and numbers) as JSON."""
    return _encoder.encode(value)


def decode(body: bytes, type_):
    """``body`` as a ``type_``; ``Malformed`` if it is not JSON of that shape."""
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.DecodeError as exc:
        raise Malformed(str(exc)) from exc


def answer_encode(outcome) -> bytes:
    """An answer: a ``DomainError`` refusal, ``RunAlone``, ``Unknown`` or else a result."""
    if isinstance(outcome, DomainError):
        return encode(_Refusal(code=outcome.code, detail=outcome.detail, payload=outcome.payload))
    if isinstance(outcome, RunAlone | Unknown):
        return encode(outcome)
    return encode(_Result(value=msgspec.Raw(encode(outcome))))


# The two answers that carry no result, encoded once: every batch sends them to its waiters.
RUN_ALONE_ANSWER, UNKNOWN_ANSWER = answer_encode(RunAlone()), answer_encode(Unknown())


def answer_decode(body: bytes, result_type):
    """The outcome an answer carries: a ``result_type``, the ``DomainError`` refused with, ``RunAlone`` or
    ``Unknown``. ``Malformed`` if it fits none, or names a refusal code no error has."""
    answer = decode(body, _Result | _Refusal | RunAlone | Unknown)
    if isinstance(answer, _Result):
        return decode(answer.value, result_type)
    if isinstance(answer, _Refusal):
        error_class = _domain_errors().get(answer.code)
        if error_class is None:
            raise Malformed(f"no error has the code {answer.code!r}")
        error = error_class.__new__(error_class)
        DomainError.__init__(error, answer.detail, **answer.payload)
        return error
    return answer


def _domain_errors() -> dict[str, type[DomainError]]:
    """Every ``DomainError`` class by its code (the apps define theirs; all are imported by now)."""
    found, pending = {}, [DomainError]
    while pending:
        error_class = pending.pop()
        found.setdefault(error_class.code, error_class)
        pending.extend(error_class.__subclasses__())
    return found
