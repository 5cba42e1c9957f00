-- The state it returns (a number) is inventory.locks.wire.LockState in Python: 0 WAITING, 1 HELD,
-- 2 SERVED, 3 SOLD_OUT. Keep the numbers in step with it.
--
-- abandon.lua: leave the queue (we gave up, were interrupted, or Redis failed us while queued), and
-- keep or pass on a lock handed to us meanwhile.
--
-- KEYS[1] lock      the lock: the holder's token
-- KEYS[2] queue     the lock's queue of waiters
-- ARGV[1] token     our owner token
-- ARGV[2] entry     our queue entry, '?' if we skipped the reply telling it (the script looks it up)
-- ARGV[3] ttl_ms    the lease, if we keep a lock handed to us
-- ARGV[4] keep      '1': keep a lock handed to us; otherwise hand it on to the next waiter
-- ARGV[5] claim_ms  the claim a hand-off gives the next waiter
--
-- Returns 1 if we hold the lock after all, 2 if a holder took our request to serve it, 0 otherwise.

local lock, queue = KEYS[1], KEYS[2]
local token, entry, ttl_ms, keep, claim_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

if redis.call('exists', lock .. ':served:' .. token) == 1 then
    return 2
end
redis.call('del', lock .. ':req:' .. token)
if entry == '?' then
    entry = entry_of(lock, token)
end
redis.call('lrem', queue, 1, entry)
if redis.call('get', lock) ~= token then
    return 0
end
if keep == '1' then
    redis.call('pexpire', lock, ttl_ms)
    return 1
end
if not hand_over(lock, queue, claim_ms) then
    redis.call('del', lock)
end
return 0
