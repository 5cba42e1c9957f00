"""The one place that takes stock locks. Nothing else talks to Redis for locking.

A lock per SKU on redis-py's ``Lock`` over the django-redis connection of the ``locks`` cache alias:
``SET NX PX`` with a random owner token, released by a Lua compare-and-delete, so a holder can never
delete another holder's lock. Waiters queue first come first served (``QueuedLock``) instead of polling.
Several SKUs are taken in sorted order so two orders over the same SKUs cannot deadlock. The TTL frees
the SKU if the holder dies; the bounded wait raises ``LockTimeout`` instead of hanging.

The lock is only the fast path. If it expires mid-section (a stall past the TTL) the database still
guards: every change is a conditional UPDATE under CHECK constraints.
"""

import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import hiredis
import redis
from django.conf import settings
from django.core.cache import caches
from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.exceptions import LockNotOwnedError, NoScriptError
from redis.lock import Lock

from inventory.errors import LockTimeout, LockUnavailable

logger = logging.getLogger(__name__)

_held = threading.local()


def lock_key(sku: str) -> str:
    return f"stock-lock:{sku}"


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

    lua_acquire = lua_release = lua_abandon = None  # registered per class, not inherited from Lock

    _PRELUDE = """
        local t = redis.call('time')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local function hand_over(lock, queue, claim_ms)
            while true do
                local entry = redis.call('lpop', queue)
                if not entry then
                    return false
                end
                local deadline, waiter = string.match(entry, '^(%d+):(.+)$')
                if tonumber(deadline) >= now then
                    redis.call('set', lock, waiter, 'PX', claim_ms)
                    local wake = lock .. ':wake:' .. waiter
                    -- With how many queue behind it now: the batch it serves is cut there.
                    redis.call('rpush', wake, 'H' .. redis.call('llen', queue) .. ':' .. entry)
                    redis.call('pexpire', wake, claim_ms)
                    return true
                end
            end
        end
        -- The entry a waiter queued with, for a caller that skipped the reply telling it ('' if none).
        local function entry_of(lock, token)
            return redis.call('get', lock .. ':entry:' .. token) or ''
        end
        -- The holder takes up to ``limit`` queued requests of ``kind`` out of the queue (in queue order)
        -- to serve them, marking each waiter served; appends waiter, request, ... to ``taken``.
        local function take_requests(lock, queue, kind, limit, ttl_ms, taken)
            local count = 0
            for _, entry in ipairs(redis.call('lrange', queue, 0, -1)) do
                if count >= limit then
                    break
                end
                local deadline, waiter = string.match(entry, '^(%d+):(.+)$')
                local request = lock .. ':req:' .. waiter
                local payload = tonumber(deadline) >= now and redis.call('get', request)
                if payload and string.sub(payload, 1, #kind) == kind then
                    redis.call('lrem', queue, 1, entry)
                    redis.call('del', request)
                    redis.call('set', lock .. ':served:' .. waiter, 1, 'PX', ttl_ms)
                    table.insert(taken, waiter)
                    table.insert(taken, string.sub(payload, #kind + 1))
                    count = count + 1
                end
            end
            return taken
        end
    """

    # KEYS: lock, queue. ARGV: token, ttl_ms, wait_ms, our entry ('' before we queue, '?' if we may
    # have queued but skipped the reply saying so), claim_ms, request (kind + body, '' for none),
    # signal ('1': wake ourselves once we hold the lock, for the BLPOP that follows in the same round
    # trip, with 'L' and the result's entry and taken requests packed), serve (the kind of queued
    # requests to take once we hold the lock, '' for none), serve_limit. Returns {1, entry, waiter,
    # request, ...} once we hold the lock (with the requests we took), {0, entry} while we wait in the
    # queue, {2, entry} once the holder took our request to serve it.
    LUA_ACQUIRE_SCRIPT = (
        _PRELUDE
        + """
        local request = KEYS[1] .. ':req:' .. ARGV[1]
        local function held(entry)
            local result = {1, entry}
            if ARGV[8] ~= '' then
                take_requests(KEYS[1], KEYS[2], ARGV[8], tonumber(ARGV[9]), ARGV[2], result)
            end
            if ARGV[7] == '1' then
                local packed = {}
                for i = 2, #result do
                    packed[#packed + 1] = #result[i] .. ':' .. result[i]
                end
                local wake = KEYS[1] .. ':wake:' .. ARGV[1]
                redis.call('rpush', wake, 'L' .. table.concat(packed))
                redis.call('pexpire', wake, ARGV[2])
            end
            return result
        end
        if ARGV[4] ~= '' and redis.call('exists', KEYS[1] .. ':served:' .. ARGV[1]) == 1 then
            return {2, ARGV[4]}
        end
        local mine = ARGV[4]
        if mine == '?' then
            mine = entry_of(KEYS[1], ARGV[1])
        end
        local holder = redis.call('get', KEYS[1])
        local head = redis.call('lindex', KEYS[2], 0)
        if not holder and head and head ~= mine then
            hand_over(KEYS[1], KEYS[2], ARGV[5])  -- free, with waiters ahead of us: theirs first
            holder = redis.call('get', KEYS[1])
        end
        if holder == ARGV[1] then
            redis.call('pexpire', KEYS[1], ARGV[2])  -- a hand-off claim becomes a full lease
            redis.call('del', request)
            return held(mine)
        end
        if not holder then
            if mine ~= '' then
                redis.call('lrem', KEYS[2], 1, mine)
                redis.call('del', request)
            end
            redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
            return held(mine)
        end
        local entry = mine
        if entry == '' then
            entry = (now + tonumber(ARGV[3])) .. ':' .. ARGV[1]
            redis.call('rpush', KEYS[2], entry)
            redis.call('set', KEYS[1] .. ':entry:' .. ARGV[1], entry, 'PX', tonumber(ARGV[3]) + tonumber(ARGV[2]))
            if ARGV[6] ~= '' then
                redis.call('set', request, ARGV[6], 'PX', tonumber(ARGV[3]) + tonumber(ARGV[2]))
            end
        elseif not redis.call('lpos', KEYS[2], entry) then
            redis.call('lpush', KEYS[2], entry)  -- our claim lapsed before we woke: back to the front
        end
        redis.call('pexpire', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]))
        return {0, entry}
    """
    )

    # KEYS: lock, queue. ARGV: token, claim_ms, ttl_ms, then waiter, answer, ... for the served waiters.
    # Hands the lock over, then wakes each served waiter with its answer (even if the lock is no
    # longer ours: we committed their orders). Returns 0 if the lock was no longer ours.
    LUA_RELEASE_SCRIPT = (
        _PRELUDE
        + """
        local released = 0
        if redis.call('get', KEYS[1]) == ARGV[1] then
            if not hand_over(KEYS[1], KEYS[2], ARGV[2]) then
                redis.call('del', KEYS[1])
            end
            released = 1
        end
        for i = 4, #ARGV, 2 do
            local wake = KEYS[1] .. ':wake:' .. ARGV[i]
            redis.call('rpush', wake, 'R' .. ARGV[i + 1])
            redis.call('pexpire', wake, ARGV[3])
        end
        return released
    """
    )

    # KEYS: lock, queue. ARGV: token, entry ('?': find it), ttl_ms, keep (1: keep a lock handed to us),
    # claim_ms. Leaves the queue; returns 1 if we hold the lock after all, 2 if the holder took our request.
    LUA_ABANDON_SCRIPT = (
        _PRELUDE
        + """
        if redis.call('exists', KEYS[1] .. ':served:' .. ARGV[1]) == 1 then
            return 2
        end
        redis.call('del', KEYS[1] .. ':req:' .. ARGV[1])
        local entry = ARGV[2]
        if entry == '?' then
            entry = entry_of(KEYS[1], ARGV[1])
        end
        redis.call('lrem', KEYS[2], 1, entry)
        if redis.call('get', KEYS[1]) ~= ARGV[1] then
            return 0
        end
        if ARGV[4] == '1' then
            redis.call('pexpire', KEYS[1], ARGV[3])
            return 1
        end
        if not hand_over(KEYS[1], KEYS[2], ARGV[5]) then
            redis.call('del', KEYS[1])
        end
        return 0
    """
    )

    sku = ""  # for logs and errors
    served = False  # a holder took our request (``acquire`` with a request)
    served_result: bytes | None = None  # and this is its answer (None: it died before answering)
    taken: list[tuple[bytes, bytes]] = []  # as holder: the queued requests we took, (waiter, body)
    _answers: dict[bytes, bytes] = {}  # as holder: answers to send with the release
    acquire_script_loaded = False  # in Redis's script cache, as far as this process knows

    def register_scripts(self) -> None:
        cls = type(self)
        if cls.lua_acquire is None:
            cls.lua_acquire = self.redis.register_script(cls.LUA_ACQUIRE_SCRIPT)
            cls.lua_abandon = self.redis.register_script(cls.LUA_ABANDON_SCRIPT)
        super().register_scripts()

    @property
    def _queue(self) -> str:
        return f"{self.name}:queue"

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
        """
        token = token if isinstance(token, bytes) else token.encode() if token else _new_token()
        blocking = self.blocking if blocking is None else blocking
        wait = (self.blocking_timeout if blocking_timeout is None else blocking_timeout) if blocking else 0
        wait = 24 * 3600 if wait is None else wait  # redis-py's None: wait (practically) forever
        poll = sleep or self.sleep
        ttl_ms, claim_ms = self._ms(self.timeout), self._ms(settings.LOCK_HANDOFF_CLAIM_SECONDS)
        wake = f"{self.name}:wake:{token.decode()}"
        request, kind = (kind + request if request else b""), (kind if serve else b"")
        deadline = time.monotonic() + wait
        entry, state, taken = b"", 0, []
        quiet = True  # the first try skips the script's reply: its wake-up message tells the outcome
        self.served, self.served_result = False, None
        try:
            while True:
                remaining = deadline - time.monotonic()
                args = [token, ttl_ms, self._ms(wait), entry, claim_ms, request, 1, kind, serve]
                if remaining <= 0:
                    args[6] = ""  # no wake-up: nobody waits for it
                    state, entry, *taken = self.lua_acquire(keys=[self.name, self._queue], args=args, client=self.redis)
                    break
                timeout = max(min(poll, remaining), 0.001)
                if quiet:
                    connection = self._quiet_connection()  # connecting sends nothing: an error here is definite
                    quiet, entry = False, b"?"  # queued, as far as we know, until a wake-up says otherwise
                    message = self._acquire_quietly_and_wait(connection, args, wake, timeout)
                else:
                    (state, entry, *taken), message = self._acquire_and_wait(args, wake, timeout)
                if message.startswith(b"L"):
                    state, (entry, *taken) = 1, _unpack(message[1:])
                elif message.startswith(b"H"):
                    queued, entry = message[1:].split(b":", 1)
                    serve = min(serve, max(int(queued), serve_at_least))
                if message.startswith(b"R"):
                    self.served, self.served_result = True, message[1:]
                    return False
                if state == 1 or deadline <= time.monotonic():
                    break
            if not state and entry:
                state = self.lua_abandon(
                    keys=[self.name, self._queue], args=[token, entry, ttl_ms, 1, claim_ms], client=self.redis
                )
            if state == 2:
                self.served, self.served_result = True, self._await_answer(wake)
                return False
        except redis.RedisError:
            if not request or not entry:
                raise  # nothing of ours reached the queue: nothing changed
            # A holder may have taken our request before Redis failed us: find out, or say we can't.
            if self._abandon_after_error(token, entry, ttl_ms, claim_ms):
                self.served, self.served_result = True, self._await_answer(wake)
            if self.served:
                return False  # with its answer, or none: the outcome is unknown
            raise
        except BaseException:
            # Interrupted (a time limit, Ctrl-C): leave the queue and pass on a lock handed to us.
            if entry:
                self.lua_abandon(
                    keys=[self.name, self._queue], args=[token, entry, ttl_ms, 0, claim_ms], client=self.redis
                )
            raise
        finally:
            if entry and state != 1 and not self.served:
                # We queued and gave up: drop our wake-up and request. (After a hand-off or an answer
                # nothing is left but a served mark, which expires by itself: one call saved per buyer.)
                self.redis.delete(wake, f"{self.name}:req:{token.decode()}")
        if state == 1:
            self.local.token = token
            self.taken = list(zip(taken[::2], taken[1::2], strict=True))
        return state == 1

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
        return _waiting_connection(self.redis.connection_pool)

    def _acquire_quietly_and_wait(self, connection: redis.Connection, args: list, wake: str, timeout: float) -> bytes:
        """The acquire script with its reply skipped, then BLPOP: our wake-up message (b"" on timeout).

        A buyer queued behind a holder thus wakes once, for its hand-off or its answer, instead of
        first for the script's reply: on a busy host each wake-up costs more CPU than Redis spends
        on the whole call. The message says what the script did ('L': we hold the lock, 'H': handed
        over to us, 'R': served). A skipped reply hides errors too: a script lost with a Redis
        restart shows as a timeout here, and the next try, with replies, loads it again.
        """
        try:
            # Packed by hiredis itself, as redis-py does, minus its Python wrapper around each command:
            # that wrapper cost a hot-SKU buyer 8 us per purchase, three times what hiredis did.
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

    def _abandon_after_error(self, token: bytes, entry: bytes, ttl_ms: int, claim_ms: int) -> bool:
        """After a Redis error while queued with a request: True if a holder took it (wait for its answer).

        False: we left the queue with our request untaken, so nothing changed (the error stands). If
        Redis cannot say, the outcome is unknown: then ``served`` is set with no answer.
        """
        try:
            state = self.lua_abandon(
                keys=[self.name, self._queue], args=[token, entry, ttl_ms, 0, claim_ms], client=self.redis
            )
        except redis.RedisError as exc:
            logger.error("lock service failed while %s's request was queued; its outcome is unknown: %s", self.sku, exc)
            self.served, self.served_result = True, None
            return False
        return state == 2

    def _await_answer(self, wake: str) -> bytes | None:
        """The holder took our request: its answer comes after its commit, while its lease lasts (a TTL).

        On the waiting connection, whose socket timeout outlasts a TTL (check ``inventory.E001``). A
        dropped connection is replaced and the wait goes on: the holder may still commit. None if no
        answer came: the outcome is unknown.
        """
        deadline = time.monotonic() + self.timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                connection = _waiting_connection(self.redis.connection_pool)
                connection.send_command("BLPOP", wake, max(remaining, 0.01))
                popped = connection.read_response()
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                _waiting.connection.disconnect()
                logger.warning("lost the lock service while waiting for an answer on %s: %s", self.sku, exc)
                time.sleep(min(0.05, max(remaining, 0)))
                continue
            if popped and popped[1].startswith(b"R"):
                return popped[1][1:]
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


def _waiting_connection(pool) -> redis.Connection:
    """This thread's connection for queued waits, made with ``pool``'s settings and kept.

    Its socket timeout is ``LOCK_WAIT_SOCKET_TIMEOUT_SECONDS``, longer than a TTL: a buyer whose
    request a holder took waits on it for the answer as long as the holder may still commit.

    Every buyer of a hot SKU waits on it once per purchase, and a pool checkout and return (a lock,
    connection bookkeeping, metrics hooks) cost about 20 of the 65 us the client spent on the whole
    call. The pool's check is kept: a socket that Redis closed (a restart) is replaced before we send
    on it. A forked child makes its own (the parent's socket is not ours to share). It is not checked
    out of the pool for good: children forked while the pool listed it in use hung in redis-py's
    reset after fork (tests/orders/test_batching.py caught it).
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


def _unpack(packed: bytes) -> list[bytes]:
    """The fields of a wake-up message, each packed as ``<length>:<bytes>`` (binary safe)."""
    fields, at = [], 0
    while at < len(packed):
        colon = packed.index(b":", at)
        end = colon + 1 + int(packed[at:colon])
        fields.append(packed[colon + 1 : end])
        at = end
    return fields


def held_skus() -> frozenset[str]:
    """SKUs whose locks this thread holds right now (a forked child holds none of its parent's)."""
    if getattr(_held, "pid", None) != os.getpid():
        return frozenset()
    return frozenset(_held.skus)


@contextmanager
def sku_locks(skus: Iterable[str], *, wait: float | None = None) -> Iterator[None]:
    """Hold the locks of ``skus`` for the duration of the block; ``wait`` overrides LOCK_WAIT_SECONDS.

    Not re-entrant: a thread that holds locks and asks for more would break the sorted order, so
    it is refused. ``inventory.services.stock_section`` lets nested services reuse the outer locks.
    """
    _refuse_nested()
    wanted = sorted(set(skus))
    acquired: list[tuple[str, Lock]] = []
    _held.skus, _held.pid = set(), os.getpid()
    started = time.monotonic()
    deadline = started + (settings.LOCK_WAIT_SECONDS if wait is None else wait)  # one budget for the set
    try:
        for sku in wanted:
            lock, got = _acquire(sku, wait=max(deadline - time.monotonic(), 0))
            waited = time.monotonic() - started
            if not got:
                logger.warning("lock_timeout: gave up on %s after %.3fs, holding %s", sku, waited, sorted(_held.skus))
                raise LockTimeout(skus=[sku], waited_seconds=round(waited, 3))
            acquired.append((sku, lock))
            _held.skus.add(sku)
        waited = time.monotonic() - started
        if waited >= settings.LOCK_WAIT_LOG_SECONDS:
            logger.info("lock wait: %s took %.3fs to acquire", ",".join(wanted), waited)
        if len(acquired) > 1 and waited > settings.LOCK_TTL_SECONDS / 10:
            _renew(acquired)  # the first locks aged while we queued for the others
        yield
    finally:
        _held.skus = set()
        for sku, lock in reversed(acquired):
            _release(sku, lock)


def _refuse_nested() -> None:
    if held_skus():
        raise RuntimeError(f"Already holding {sorted(held_skus())}: lock every SKU at once, in one call")


def _new_token() -> bytes:
    """A lock owner token, unique per acquisition: a random prefix per process and a counter.

    A hot-SKU buyer makes one per purchase, and ``uuid4`` (a system call and an object) cost more.
    """
    return f"{_token_prefix}{next(_token_counter):x}".encode()


def _new_token_prefix() -> None:
    global _token_prefix, _token_counter
    _token_prefix, _token_counter = uuid.uuid4().hex, itertools.count()


_new_token_prefix()
os.register_at_fork(after_in_child=_new_token_prefix)  # a forked child must not repeat its parent's tokens


_clients = threading.local()
_clients_generation = 0  # bumped when the cache settings change (tests): every thread looks again


@receiver(setting_changed)
def _forget_lock_clients(*, setting, **kwargs):
    global _clients_generation
    if setting in {"CACHES", "LOCK_CACHE_ALIAS"}:
        _clients_generation += 1


def _lock_client():
    """This thread's Redis client for locks and the cache's key function, looked up once.

    ``caches[...]`` is a context-local lookup; a hot-SKU buyer would pay it on every purchase.
    """
    if getattr(_clients, "generation", None) != _clients_generation:
        client = caches[settings.LOCK_CACHE_ALIAS].client
        _clients.redis, _clients.make_key = client.get_client(write=True), client.make_key
        _clients.generation = _clients_generation
    return _clients.redis, _clients.make_key


def _acquire(sku: str, *, wait: float, kind: bytes = b"", request: bytes = b"") -> tuple[QueuedLock, bool]:
    """One SKU's lock and whether we got it; an unreachable Redis is ``lock_unavailable``."""
    try:
        redis_client, make_key = _lock_client()
        lock = redis_client.lock(
            make_key(lock_key(sku)),
            timeout=settings.LOCK_TTL_SECONDS,
            sleep=settings.LOCK_POLL_SECONDS,
            lock_class=QueuedLock,
            thread_local=False,  # one object per acquisition, used by the thread that made it
        )
        lock.sku = sku
        serve, serve_at_least = (settings.STOCK_BATCH_MAX - 1, settings.STOCK_BATCH_MIN - 1) if kind else (0, 0)
        return lock, lock.acquire(
            blocking_timeout=wait, kind=kind, request=request, serve=serve, serve_at_least=serve_at_least
        )
    except redis.RedisError as exc:
        QueuedLock.acquire_script_loaded = False  # a restarted Redis has lost it
        logger.error("lock service unreachable while locking %s: %s", sku, exc)
        raise LockUnavailable(skus=[sku]) from exc


@contextmanager
def sku_lock_serving(sku: str, *, kind: str, body: bytes, wait: float | None = None):
    """Hold one SKU's lock, or have its holder serve our request: group commit for a hot SKU.

    A waiter leaves ``body`` with its place in the queue. The holder gets the lock with the queued
    requests of its ``kind`` in ``lock.taken`` (up to STOCK_BATCH_MAX - 1; ``QueuedLock.acquire`` says
    where a batch is cut), carries them out in its own transaction and ``answer``s each after the
    commit, so one lock hold and one commit serve a whole queue of buyers. Yields ``(lock, None)``
    to the holder and ``(None, answer)`` to a served waiter, which holds nothing; ``answer`` is None
    if the outcome is unknown: the holder took the request and never answered (it died, or stalled
    past its TTL), or Redis failed while the request may have been taken.
    """
    _refuse_nested()
    started = time.monotonic()
    wait = settings.LOCK_WAIT_SECONDS if wait is None else wait
    lock, got = _acquire(sku, wait=wait, kind=kind.encode(), request=body)
    waited = time.monotonic() - started
    if waited >= settings.LOCK_WAIT_LOG_SECONDS:
        logger.info("lock wait: %s took %.3fs to %s", sku, waited, "be served" if lock.served else "acquire")
    if lock.served:
        yield None, lock.served_result
        return
    if not got:
        logger.warning("lock_timeout: gave up on %s after %.3fs", sku, waited)
        raise LockTimeout(skus=[sku], waited_seconds=round(waited, 3))
    _held.skus, _held.pid = {sku}, os.getpid()
    try:
        yield lock, None
    finally:
        _held.skus = set()
        _release(sku, lock)


def _renew(acquired: list[tuple[str, Lock]]) -> None:
    """Give every held lock a full TTL again; if one already lapsed, give up rather than run unlocked."""
    for sku, lock in acquired:
        try:
            lock.extend(settings.LOCK_TTL_SECONDS, replace_ttl=True)
        except LockNotOwnedError as exc:
            logger.warning("lock_timeout: the lock on %s lapsed while waiting for the others", sku)
            raise LockTimeout(skus=[sku]) from exc


def _release(sku: str, lock: Lock) -> None:
    try:
        lock.release()
    except LockNotOwnedError:
        # The TTL ran out before we finished: another process may have held the SKU at the same
        # time. The SQL guard decided the outcome, but the TTL is too short for this workload.
        logger.error(
            "lock overrun: the lock on %s expired before its holder released it (TTL %.1fs); "
            "the database guard decided the outcome",
            sku,
            settings.LOCK_TTL_SECONDS,
        )
    except redis.RedisError as exc:
        # The TTL will free the key; the transaction has already committed or rolled back.
        logger.error(
            "could not release the lock on %s: %s; it expires within %.1fs", sku, exc, settings.LOCK_TTL_SECONDS
        )


def lock_list() -> list[dict]:
    """Every stock lock in Redis now: SKU, milliseconds left, waiters queued (for operators)."""
    client = caches[settings.LOCK_CACHE_ALIAS].client
    redis_client = client.get_client(write=True)
    prefix = client.make_key(lock_key(""))
    held = []
    for key in redis_client.scan_iter(match=f"{prefix}*", count=500):
        sku = key.decode()[len(prefix) :]
        if ":" in sku:  # a queue or wake-up list, not a lock
            continue
        held.append(
            {"sku": sku, "ttl_ms": redis_client.pttl(key), "waiters": redis_client.llen(f"{key.decode()}:queue")}
        )
    return sorted(held, key=lambda lock: lock["sku"])


def lock_clear_all(*, force: bool) -> int:
    """Delete stale lock keys (queues, wake-up lists); with ``force`` also locks someone holds.

    Deleting a held lock lets a second holder in while the first is mid-transaction; the SQL guard
    still prevents overselling, but operators should only force after the holders are known dead.
    Returns how many keys were deleted.
    """
    client = caches[settings.LOCK_CACHE_ALIAS].client
    redis_client = client.get_client(write=True)
    prefix = client.make_key(lock_key(""))
    keys = [
        key
        for key in redis_client.scan_iter(match=f"{prefix}*", count=500)
        if force or ":" in key.decode()[len(prefix) :]
    ]
    if keys:
        redis_client.delete(*keys)
    logger.warning("cleared %d stock lock key(s)%s", len(keys), " including held locks (forced)" if force else "")
    return len(keys)
