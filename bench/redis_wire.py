"""Redis round trips as redis-py sends them: what tests/inventory/test_round_trips.py pins and the report shows.

Counted on the wire (each write to a connection) rather than per client method, so a pipeline, a
single command and the lock's raw quiet acquire all count the same way: one write, one round trip.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from redis.connection import AbstractConnection


def command_names(packed) -> list[str]:
    """The command names in one write (RESP arrays of bulk strings)."""
    data = b"".join(packed) if isinstance(packed, (list, tuple)) else bytes(packed)
    names, at = [], 0
    while at < len(data):
        end = data.index(b"\r\n", at)
        count, at = int(data[at + 1 : end]), end + 2
        for index in range(count):
            end = data.index(b"\r\n", at)
            size, at = int(data[at + 1 : end]), end + 2
            if index == 0:
                names.append(data[at : at + size].decode())
            at += size + 2
    return names


@contextmanager
def redis_round_trips() -> Iterator[list[str]]:
    """Record each write while active, as its command names joined by '+' (``EVALSHA+BLPOP``)."""
    sent: list[str] = []
    original = AbstractConnection.send_packed_command

    def recording(connection, command, *args, **options):
        sent.append("+".join(command_names(command)))
        return original(connection, command, *args, **options)

    AbstractConnection.send_packed_command = recording
    try:
        yield sent
    finally:
        AbstractConnection.send_packed_command = original
