-- prelude.lua: the start of every lock script. acquire.lua, release.lua and abandon.lua each run as
-- this prelude followed by the script, so they share what it defines. It reads no KEYS or ARGV.
-- The keys of a lock and its wake-up messages are laid out in inventory/locks/wire.py.
--
-- LOCKED, HANDED_OVER, ANSWERED, SOLD_OUT  the kinds of wake-up message (their first byte)
-- now                            Redis server time in ms: deadlines never trust a client's clock
-- hand_over(lock, queue, claim_ms)
--     Gives the lock to the first waiter whose deadline has not passed, on a claim of claim_ms, and
--     wakes it with HANDED_OVER; drops the expired entries it passes. False if nobody is left.
-- entry_of(lock, token)
--     The entry a waiter queued with, for a caller that skipped the reply telling it ('' if none).
-- take_requests(lock, queue, kind, limit, ttl_ms, taken)
--     The holder takes up to limit queued requests of kind out of the queue (in queue order) to
--     serve them, marking each waiter served for ttl_ms; appends waiter, request, ... to taken.

local LOCKED, HANDED_OVER, ANSWERED, SOLD_OUT = 'L', 'H', 'R', 'S'

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
            redis.call('rpush', wake, HANDED_OVER .. redis.call('llen', queue) .. ':' .. entry)
            redis.call('pexpire', wake, claim_ms)
            return true
        end
    end
end

local function entry_of(lock, token)
    return redis.call('get', lock .. ':entry:' .. token) or ''
end

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
