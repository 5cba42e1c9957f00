-- take_free.lua: take, in the order given, every lock that is free and has nobody queued for it, up
-- to the first that is held or has waiters; that one the caller queues for (acquire.lua). Several
-- SKUs that nobody holds are thus locked in one round trip, in the same sorted order as one by one.
--
-- KEYS[1], KEYS[2]  the first lock and its queue of waiters; KEYS[3], KEYS[4] the second; ...
-- ARGV[1] token     our owner token, the same for every lock taken here
-- ARGV[2] ttl_ms    the lease
-- ARGV[3] sold_out  '1': first look at every lock's sold-out mark; if any is set, take nothing
--
-- Returns {taken} (how many locks, from the first, are now ours), or {0, i, j, ...}: the positions
-- (1 for the first lock) of the locks whose SKUs are marked sold out, with nothing taken.

local token, ttl_ms, refuse_sold_out = ARGV[1], ARGV[2], ARGV[3] == '1'

if refuse_sold_out then
    local result = {0}
    for i = 1, #KEYS, 2 do
        if redis.call('exists', KEYS[i] .. ':soldout') == 1 then
            result[#result + 1] = (i + 1) / 2
        end
    end
    if #result > 1 then
        return result
    end
end
local taken = 0
for i = 1, #KEYS, 2 do
    if redis.call('exists', KEYS[i]) == 1 or redis.call('llen', KEYS[i + 1]) > 0 then
        break
    end
    redis.call('set', KEYS[i], token, 'PX', ttl_ms)
    taken = taken + 1
end
return {taken}
