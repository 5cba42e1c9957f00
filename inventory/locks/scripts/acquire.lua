-- The state it returns (a number) is inventory.locks.wire.LockState in Python: 0 WAITING, 1 HELD,
-- 2 SERVED, 3 SOLD_OUT. Keep the numbers in step with it.
--
-- acquire.lua: take the lock, or queue for it first come first served, or learn that a holder took
-- our request to serve it. Run again by a waiter on each wake-up, with the entry it queued with.
--
-- KEYS[1] lock         the lock: the holder's token, with the lease (or a hand-off claim) as its TTL
-- KEYS[2] queue        the lock's queue of waiters
-- ARGV[1] token        our owner token
-- ARGV[2] ttl_ms       the lease
-- ARGV[3] wait_ms      how long we may wait: our deadline in the queue is now + wait_ms
-- ARGV[4] mine         our queue entry: '' before we queue, '?' if we may have queued but skipped the
--                      reply saying so (the script looks it up)
-- ARGV[5] claim_ms     the claim a hand-off gives the next waiter
-- ARGV[6] request      what we leave with our place in the queue (kind .. body), '' for none
-- ARGV[7] signal       '1': once we hold the lock, wake ourselves with LOCKED and the result's entry
--                      and taken requests (or, refused as sold out, with SOLD_OUT), for the BLPOP
--                      that follows in the same round trip
-- ARGV[8] serve_kind   the kind of queued requests to take once we hold the lock, '' for none
-- ARGV[9] serve_limit  how many of them to take at most
-- ARGV[10] sold_out    '1': refuse at once, without queueing, while the lock's sold-out mark is set
--
-- Returns {1, entry, waiter, request, ...} once we hold the lock (with the requests we took to serve),
-- {0, entry} while we wait in the queue, {2, entry} once a holder took our request to serve it,
-- {3, ''} if we did not queue because the SKU is marked sold out (signalled with SOLD_OUT).

local lock, queue = KEYS[1], KEYS[2]
local token, ttl_ms, wait_ms, mine, claim_ms = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local request, signal, serve_kind, serve_limit = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local refuse_sold_out = ARGV[10] == '1'

local request_key = lock .. ':req:' .. token
local keep_ms = wait_ms + tonumber(ttl_ms) -- what we queue outlives our deadline by a lease

local function held(entry)
    local result = {1, entry}
    if serve_kind ~= '' then
        take_requests(lock, queue, serve_kind, serve_limit, ttl_ms, result)
    end
    if signal == '1' then
        local packed = {}
        for i = 2, #result do
            packed[#packed + 1] = #result[i] .. ':' .. result[i]
        end
        local wake = lock .. ':wake:' .. token
        redis.call('rpush', wake, LOCKED .. table.concat(packed))
        redis.call('pexpire', wake, ttl_ms)
    end
    return result
end

if mine ~= '' and redis.call('exists', lock .. ':served:' .. token) == 1 then
    return {2, mine}
end
if mine == '?' then
    mine = entry_of(lock, token)
end
if mine == '' and refuse_sold_out and redis.call('exists', lock .. ':soldout') == 1 then
    if signal == '1' then
        local wake = lock .. ':wake:' .. token
        redis.call('rpush', wake, SOLD_OUT)
        redis.call('pexpire', wake, ttl_ms)
    end
    return {3, ''}
end
local holder = redis.call('get', lock)
local head = redis.call('lindex', queue, 0)
if not holder and head and head ~= mine then
    hand_over(lock, queue, claim_ms) -- free, with waiters ahead of us: theirs first
    holder = redis.call('get', lock)
end
if holder == token then
    redis.call('pexpire', lock, ttl_ms) -- a hand-off claim becomes a full lease
    redis.call('del', request_key)
    return held(mine)
end
if not holder then
    if mine ~= '' then
        redis.call('lrem', queue, 1, mine)
        redis.call('del', request_key)
    end
    redis.call('set', lock, token, 'PX', ttl_ms)
    return held(mine)
end
local entry = mine
if entry == '' then
    entry = (now + wait_ms) .. ':' .. token
    redis.call('rpush', queue, entry)
    redis.call('set', lock .. ':entry:' .. token, entry, 'PX', keep_ms)
    if request ~= '' then
        redis.call('set', request_key, request, 'PX', keep_ms)
    end
elseif not redis.call('lpos', queue, entry) then
    redis.call('lpush', queue, entry) -- our claim lapsed before we woke: back to the front
end
redis.call('pexpire', queue, keep_ms)
return {0, entry}
