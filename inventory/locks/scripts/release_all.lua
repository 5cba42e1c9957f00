-- release_all.lua: release several locks in one round trip, each handed to its next waiter as
-- release.lua does (no answers: only a one-SKU holder serves a queue).
--
-- KEYS[1], KEYS[2]  the first lock and its queue of waiters; KEYS[3], KEYS[4] the second; ...
-- ARGV[1] claim_ms  the claim a hand-off gives the next waiter
-- ARGV[2], ...      the owner token we hold each lock with, in the order of KEYS
--
-- Returns, per lock, 1 if we released it and 0 if it was no longer ours.

local claim_ms = ARGV[1]
local released = {}
for i = 1, #KEYS, 2 do
    local lock, queue = KEYS[i], KEYS[i + 1]
    if redis.call('get', lock) == ARGV[(i + 1) / 2 + 1] then
        if not hand_over(lock, queue, claim_ms) then
            redis.call('del', lock)
        end
        released[#released + 1] = 1
    else
        released[#released + 1] = 0
    end
end
return released
