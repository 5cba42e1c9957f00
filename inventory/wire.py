"""The plain data group commit's requests and answers travel in through Redis.

A queued buyer leaves its request in Redis and the lock holder leaves its answer there. Both are JSON
decoded against an explicit type (msgspec), so whatever anyone writes into Redis is only ever data:
a value that does not fit its type is refused (``Malformed``), never run, as an unpickled one would be.
"""

from typing import Any

import msgspec

from core.errors import DomainError


class Malformed(ValueError):
    """A request or answer that does not fit its type. The caller refuses it and logs it."""


class RunAlone(msgspec.Struct, tag="run_alone"):
    """The holder's batch failed before its commit: nothing was done for the request; carry it out alone."""


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
