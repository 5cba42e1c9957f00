-- release.lua: release the lock, handing it to the next waiter, and answer the waiters we served.
-- The answers go out even if the lock is no longer ours: we committed their orders.
--
-- KEYS[1] lock           the lock: the holder's token
-- KEYS[2] queue          the lock's queue of waiters
-- ARGV[1] token          our owner token
-- ARGV[2] claim_ms       the claim a hand-off gives the next waiter
-- ARGV[3] ttl_ms         how long an answer waits in a waiter's wake-up list (a lease)
-- ARGV[4], ARGV[5], ...  waiter, answer: each waiter we served (its token) and our answer to it
--
-- Returns 1 if we released the lock, 0 if it was no longer ours.

local lock, queue = KEYS[1], KEYS[2]
local token, claim_ms, ttl_ms = ARGV[1], ARGV[2], ARGV[3]

local released = 0
if redis.call('get', lock) == token then
    if not hand_over(lock, queue, claim_ms) then
        redis.call('del', lock)
    end
    released = 1
end
for i = 4, #ARGV, 2 do
    local waiter, answer = ARGV[i], ARGV[i + 1]
    local wake = lock .. ':wake:' .. waiter
    redis.call('rpush', wake, ANSWERED .. answer)
    redis.call('pexpire', wake, ttl_ms)
end
return released
