"""``QueuedLock``: redis-py's ``Lock``, first come first served, whose holder may serve the queue.

The Lua scripts it runs are in ``scripts/``; the keys and wake-up messages they share with this module
are laid out in ``wire``.
"""

import itertools
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Literal

import hiredis
import redis
from django.conf import settings
from redis.exceptions import LockNotOwnedError, NoScriptError
from redis.lock import Lock

from inventory.locks import wire
from inventory.locks.wire import LockState

logger = logging.getLogger(__package__)  # one logger for the package: inventory.locks

_SCRIPTS = Path(__file__).with_name("scripts")


def _script(name: str) -> str:
    """The lock script ``scripts/<name>.lua``, after the prelude every lock script starts with."""
    return (_SCRIPTS / "prelude.lua").read_text() + (_SCRIPTS / f"{name}.lua").read_text()


class QueuedLock(Lock):
    """redis-py's ``Lock``, first come first served: a release hands the lock to the longest waiter.

    Plain redis-py waiters poll (0.1 s sleeps by default): each wait costs up to a poll of latency,
    every poll costs CPU, and a newcomer that arrives just after a release barges past waiters
    that are asleep, so under a flash sale some buyers starve into ``lock_timeout``. Here a waiter
    queues ``<deadline>:<token>`` in ``<key>:queue`` and blocks on its own wake-up list. A release
    (same compare-and-delete ownership check as redis-py) hands the key to the head of the queue on a
    short *claim* and wakes it; the woken waiter turns the claim into a full lease. A waiter that died
    in the queue therefore costs at most one claim, never a full TTL; one that gave up or was
    interrupted leaves the queue (and passes the lock on if it was handed over meanwhile). Deadlines
    are in Redis server time, so no client clock is trusted. The poll remains only as a fallback for
    a lock that expired unreleased. The first try skips the script's reply (the wake-up message says
    what it did), so a queued buyer wakes once, for its hand-off or its answer. Needs a single Redis
    (the scripts derive the wake-up key names, which Redis Cluster forbids). ``bench/lock_wait.py``
    measures this against polling.
    """

    lua_acquire = lua_release = lua_abandon = lua_take_free = lua_release_all = None  # per class, not Lock's

    LUA_ACQUIRE_SCRIPT = _script("acquire")
    LUA_RELEASE_SCRIPT = _script("release")  # replaces redis-py's, which ``Lock.register_scripts`` registers
    LUA_ABANDON_SCRIPT = _script("abandon")
    LUA_TAKE_FREE_SCRIPT = _script("take_free")
    LUA_RELEASE_ALL_SCRIPT = _script("release_all")

    sku = ""  # for logs and errors
    served = False  # a holder took our request (``acquire`` with a request)
    served_result: bytes | None = None  # and this is its answer (None: it died before answering)
    sold_out = False  # refused: the SKU is marked sold out (``acquire`` with ``refuse_sold_out``)
    taken: list[tuple[bytes, bytes]] = []  # as holder: the queued requests we took, (waiter, body)
    _answers: dict[bytes, bytes] = {}  # as holder: answers to send with the release
    acquire_script_loaded = False  # in Redis's script cache, as far as this process knows

    def register_scripts(self) -> None:
        cls = type(self)
        if cls.lua_acquire is None:
            cls.lua_acquire = self.redis.register_script(cls.LUA_ACQUIRE_SCRIPT)
            cls.lua_abandon = self.redis.register_script(cls.LUA_ABANDON_SCRIPT)
            cls.lua_take_free = self.redis.register_script(cls.LUA_TAKE_FREE_SCRIPT)
            cls.lua_release_all = self.redis.register_script(cls.LUA_RELEASE_ALL_SCRIPT)
        super().register_scripts()

    @classmethod
    def take_free(cls, locks: list["QueuedLock"], *, refuse_sold_out: bool = False) -> tuple[int, list[str]]:
        """Take, in one round trip, the locks from the first up to the first one held or queued for.

        Returns how many were taken (each then holds with one shared token) and, with
        ``refuse_sold_out``, the SKUs marked sold out, in which case nothing was taken.
        """
        first = locks[0]
        token = _new_token()
        keys = [key for lock in locks for key in (lock.name, lock._queue)]
        # ARGV of take_free.lua: token, ttl_ms, sold_out
        taken, *marked = cls.lua_take_free(
            keys=keys, args=[token, first._ms(first.timeout), b"1" if refuse_sold_out else b""], client=first.redis
        )
        for lock in locks[:taken]:
            lock.local.token = token
        return taken, [locks[position - 1].sku for position in marked]

    @classmethod
    def release_all(cls, locks: list["QueuedLock"]) -> list["QueuedLock"]:
        """Release held locks in one round trip, each handed to its next waiter; returns those no longer ours."""
        first = locks[0]
        tokens = [lock.local.token for lock in locks]
        for lock in locks:
            lock.local.token = None
        # ARGV of release_all.lua: claim_ms, then the token of each lock
        released = cls.lua_release_all(
            keys=[key for lock in locks for key in (lock.name, lock._queue)],
            args=[first._ms(settings.LOCK_HANDOFF_CLAIM_SECONDS), *tokens],
            client=first.redis,
        )
        return [lock for lock, ours in zip(locks, released, strict=True) if not ours]

    @property
    def _queue(self) -> str:
        return wire.queue_key(self.name)

    def _ms(self, seconds: float) -> int:
        return max(int(seconds * 1000), 1)

    def acquire(
        self,
        sleep=None,
        blocking=None,
        blocking_timeout=None,
        token=None,
        *,
        kind: bytes = b"",
        request: bytes = b"",
        serve: int = 0,
        serve_at_least: int = 0,
        refuse_sold_out: bool = False,
    ) -> bool:
        """redis-py's ``acquire``; with a ``request`` of a ``kind``, the holder may serve it instead.

        Served means the holder took the request out of the queue and ran it in its own transaction:
        then this returns False with the holder's answer in ``served_result``, and no lock is held.
        With ``serve`` > 0 we serve in turn: on getting the lock, the same script takes up to ``serve``
        queued requests of our ``kind`` into ``taken``, and we ``answer`` them before releasing.

        Handed the lock, we serve only those queued behind us at the hand-off (but up to
        ``serve_at_least`` if fewer were): we wake among the buyers the last holder just answered,
        and if we waited for them all to queue again, every batch would take nearly every buyer and
        the next one almost none, so a buyer who missed a batch would wait for two.

        With ``refuse_sold_out``, a SKU marked sold out (``soldout``) is answered by the first try,
        in the round trip that would have queued us: False, with ``sold_out`` set, nothing queued.
        """
        token = token if isinstance(token, bytes) else token.encode() if token else _new_token()
        blocking = self.blocking if blocking is None else blocking
        wait = (self.blocking_timeout if blocking_timeout is None else blocking_timeout) if blocking else 0
        wait = 24 * 3600 if wait is None else wait  # redis-py's None: wait (practically) forever
        poll = sleep or self.sleep
        ttl_ms, claim_ms = self._ms(self.timeout), self._ms(settings.LOCK_HANDOFF_CLAIM_SECONDS)
        wake = wire.wake_key(self.name, token)
        request, kind = (kind + request if request else b""), (kind if serve else b"")
        deadline = time.monotonic() + wait
        entry, state, taken = b"", LockState.WAITING, []
        quiet = True  # the first try skips the script's reply: its wake-up message tells the outcome
        self.served, self.served_result, self.sold_out = False, None, False
        sold_out = b"1" if refuse_sold_out else b""
        try:
            while True:
                remaining = deadline - time.monotonic()
                signal = 1 if remaining > 0 else ""  # no wake-up on the last try: nobody waits for it
                # ARGV of acquire.lua: token, ttl_ms, wait_ms, mine, claim_ms, request, signal, serve_kind,
                # serve_limit, sold_out
                args = [token, ttl_ms, self._ms(wait), entry, claim_ms, request, signal, kind, serve, sold_out]
                if remaining <= 0:
                    state, entry, *taken = self.lua_acquire(keys=[self.name, self._queue], args=args, client=self.redis)
                    state = LockState(state)
                    break
                timeout = max(min(poll, remaining), 0.001)
                if quiet:
                    connection = self._quiet_connection()  # connecting sends nothing: an error here is definite
                    quiet, entry = False, b"?"  # queued, as far as we know, until a wake-up says otherwise
                    message = self._acquire_quietly_and_wait(connection, args, wake, timeout)
                else:
                    (state, entry, *taken), message = self._acquire_and_wait(args, wake, timeout)
                    state = LockState(state)
                message_kind = message[:1]  # b"" if no message came before the timeout
                if message_kind == wire.LOCKED:
                    state, (entry, *taken) = LockState.HELD, wire.locked_decode(message)
                elif message_kind == wire.HANDED_OVER:
                    queued, entry = wire.handed_over_decode(message)
                    serve = min(serve, max(queued, serve_at_least))
                elif message_kind == wire.ANSWERED:
                    self.served, self.served_result = True, wire.answered_decode(message)
                    return False
                elif message_kind == wire.SOLD_OUT:
                    state, entry = LockState.SOLD_OUT, b""
                if state in (LockState.HELD, LockState.SOLD_OUT) or deadline <= time.monotonic():
                    break
            if state == LockState.WAITING and entry:
                state = LockState(
                    self.lua_abandon(
                        keys=[self.name, self._queue], args=[token, entry, ttl_ms, 1, claim_ms], client=self.redis
                    )
                )
            if state == LockState.SERVED:
                self.served, self.served_result = True, self._await_answer(wake)
                return False
            if state == LockState.SOLD_OUT:
                self.sold_out = True
                return False
        except redis.RedisError:
            if not request or not entry:
                raise  # nothing of ours reached the queue: nothing changed
            # A holder may have taken our request before Redis failed us: find out, or say we can't.
            request_fate = self._abandon_after_error(token, entry, ttl_ms, claim_ms)
            if request_fate == "untaken":
                raise
            # Served: with the holder's answer, or with none if the outcome is unknown.
            self.served, self.served_result = True, self._await_answer(wake) if request_fate == "taken" else None
            return False
        except BaseException:
            # Interrupted (a time limit, Ctrl-C): leave the queue and pass on a lock handed to us.
            if entry:
                self.lua_abandon(
                    keys=[self.name, self._queue], args=[token, entry, ttl_ms, 0, claim_ms], client=self.redis
                )
            raise
        finally:
            if entry and state != LockState.HELD and not self.served:
                # We queued and gave up: drop our wake-up and request. (After a hand-off or an answer
                # nothing is left but a served mark, which expires by itself: one call saved per buyer.)
                self.redis.delete(wake, wire.request_key(self.name, token))
        if state == LockState.HELD:
            self.local.token = token
            self.taken = list(zip(taken[::2], taken[1::2], strict=True))
        return state == LockState.HELD

    def _acquire_and_wait(self, args: list, wake: str, timeout: float) -> tuple[list, bytes]:
        """The acquire script, then BLPOP on our wake-up list, in one round trip: its result and our message.

        Holding the lock already, the script signals us and BLPOP returns at once.
        """
        result, popped = self._script_then(self.lua_acquire, args, [("BLPOP", wake, timeout)])
        return result, popped[1] if popped else b""

    def _quiet_connection(self) -> redis.Connection:
        """The waiting connection, with the acquire script known to be loaded in Redis."""
        if not QueuedLock.acquire_script_loaded:
            self.redis.script_load(self.LUA_ACQUIRE_SCRIPT)
            QueuedLock.acquire_script_loaded = True
        return waiting_connection(self.redis.connection_pool)

    def _acquire_quietly_and_wait(self, connection: redis.Connection, args: list, wake: str, timeout: float) -> bytes:
        """The acquire script with its reply skipped, then BLPOP: our wake-up message (b"" on timeout).

        A buyer queued behind a holder thus wakes once, for its hand-off or its answer, instead of
        first for the script's reply: on a busy host each wake-up costs more CPU than Redis spends
        on the whole call. The wake-up message says what the script did (``wire``). A skipped reply
        hides errors too: a script lost with a Redis restart shows as a timeout here, and the next
        try, with replies, loads it again.
        """
        try:
            # Packed by hiredis itself, as redis-py does, without redis-py's Python wrapper around
            # each command, which costs a hot-SKU buyer more than the packing.
            connection.send_packed_command(
                [
                    _CLIENT_REPLY_SKIP
                    + hiredis.pack_command(("EVALSHA", self.lua_acquire.sha, 2, self.name, self._queue, *args))
                    + hiredis.pack_command(("BLPOP", wake, timeout))
                ]
            )
            popped = connection.read_response()
        except BaseException:
            connection.disconnect()  # a reply may be left unread on it; the next send reconnects
            raise
        return popped[1] if popped else b""

    def _script_then(self, script, args: list, commands: list[tuple]) -> list:
        """``script`` on (lock, queue) and then ``commands``, in one pipeline: the script's result, then theirs.

        The script goes by its SHA: redis-py would check that it exists before every pipeline. If a
        Redis restart lost it, it is loaded and run again on its own (the commands have run).
        """
        pipe = self.redis.pipeline(transaction=False)
        pipe.evalsha(script.sha, 2, self.name, self._queue, *args)
        for command in commands:
            pipe.execute_command(*command)
        scripted, *results = pipe.execute(raise_on_error=False)
        if isinstance(scripted, NoScriptError):
            scripted = script(keys=[self.name, self._queue], args=args, client=self.redis)
        for result in (scripted, *results):
            if isinstance(result, Exception):
                raise result
        return [scripted, *results]

    def _abandon_after_error(
        self, token: bytes, entry: bytes, ttl_ms: int, claim_ms: int
    ) -> Literal["taken", "untaken", "unknown"]:
        """After a Redis error while queued with a request: leave the queue and say what became of the request.

        "taken": a holder took it, so its answer is coming. "untaken": we left the queue with it, so
        nothing changed (the error stands). "unknown": Redis cannot say, so neither can we.
        """
        try:
            state = LockState(
                self.lua_abandon(
                    keys=[self.name, self._queue], args=[token, entry, ttl_ms, 0, claim_ms], client=self.redis
                )
            )
        except redis.RedisError as exc:
            logger.error("lock service failed while %s's request was queued; its outcome is unknown: %s", self.sku, exc)
            return "unknown"
        return "taken" if state == LockState.SERVED else "untaken"

    def _await_answer(self, wake: str) -> bytes | None:
        """The holder took our request: its answer comes after its commit, while its lease lasts (a TTL).

        On the waiting connection, whose socket timeout outlasts a TTL (check ``inventory.E001``). A
        dropped connection is replaced and the wait goes on: the holder may still commit. None if no
        answer came: the outcome is unknown.
        """
        deadline = time.monotonic() + self.timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                connection = waiting_connection(self.redis.connection_pool)
                connection.send_command("BLPOP", wake, max(remaining, 0.01))
                popped = connection.read_response()
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                _waiting.connection.disconnect()
                logger.warning("lost the lock service while waiting for an answer on %s: %s", self.sku, exc)
                time.sleep(min(0.05, max(remaining, 0)))
                continue
            if popped and popped[1][:1] == wire.ANSWERED:
                return wire.answered_decode(popped[1])
        logger.warning("lock_timeout: the holder of %s took a request and never answered", self.sku)
        return None

    def answer(self, answers: dict[bytes, bytes]) -> None:
        """As holder, after the commit: the answers for the ``taken`` waiters, sent with the release."""
        self._answers = answers

    def do_release(self, expected_token) -> None:
        """Release (hand over) the lock and wake each served waiter with its answer, in one script call.

        One command however large the batch: the holder's release is on every queued buyer's path.
        If Redis fails now, the waiters' own wait fails too (or times out): they retry with their
        Idempotency-Key and find the order committed here. The holder's own outcome stands.
        """
        answers, self._answers = self._answers, {}
        claim_ms = self._ms(settings.LOCK_HANDOFF_CLAIM_SECONDS)
        # ARGV of release.lua: token, claim_ms, ttl_ms, then waiter, answer, ...
        args = [expected_token, claim_ms, self._ms(self.timeout), *(part for pair in answers.items() for part in pair)]
        try:
            released = self.lua_release(keys=[self.name, self._queue], args=args, client=self.redis)
        except redis.RedisError:
            if answers:
                logger.error("could not answer %d served request(s) on %s", len(answers), self.sku)
            raise
        if not released:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)


_waiting = threading.local()
_CLIENT_REPLY_SKIP = hiredis.pack_command(("CLIENT", "REPLY", "SKIP"))


def waiting_connection(pool) -> redis.Connection:
    """This thread's connection for queued waits, made with ``pool``'s settings and kept.

    Its socket timeout is ``LOCK_WAIT_SOCKET_TIMEOUT_SECONDS``, longer than a TTL: a buyer whose
    request a holder took waits on it for the answer as long as the holder may still commit.

    Every buyer of a hot SKU waits on it once per purchase, so it skips the pool's checkout and return
    (a lock, connection bookkeeping, metrics hooks) but keeps the pool's check: a socket that Redis
    closed (a restart) is replaced before we send on it. A forked child makes its own (the parent's
    socket is not ours to share). It is made beside the pool, never checked out of it for good: a
    child forked while the pool lists a connection in use hangs in redis-py's reset after the fork.
    """
    timeout = settings.LOCK_WAIT_SOCKET_TIMEOUT_SECONDS
    if getattr(_waiting, "pid", None) != os.getpid() or _waiting.pool is not pool or _waiting.timeout != timeout:
        connection = pool.connection_class(**(pool.connection_kwargs | {"socket_timeout": timeout}))
        _waiting.connection, _waiting.pool, _waiting.pid, _waiting.timeout = connection, pool, os.getpid(), timeout
    connection = _waiting.connection
    connection.connect()  # after a failed wait disconnected it; nothing to do while connected
    try:
        if connection.can_read():
            raise redis.ConnectionError("stray data on the waiting connection")
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        connection.disconnect()
        connection.connect()
    return connection


def _new_token() -> bytes:
    """A lock owner token, unique per acquisition: a random prefix per process and a counter.

    A hot-SKU buyer makes one per purchase, and ``uuid4`` (a system call and an object) costs more.
    """
    return f"{_token_prefix}{next(_token_counter):x}".encode()


def _new_token_prefix() -> None:
    global _token_prefix, _token_counter
    _token_prefix, _token_counter = uuid.uuid4().hex, itertools.count()


_new_token_prefix()
os.register_at_fork(after_in_child=_new_token_prefix)  # a forked child must not repeat its parent's tokens
