-- End a claim. ARGV: base, ticket, outcome ('admitted', 'back' or 'refused'), order number, refusal
-- code, when the hold lapses (ms), the news channel, the drop's id. 'back' puts the ticket at its own
-- place again. The place's change is published (its stream, if open, reads it: drops.push). Answers 1,
-- or 0 if the ticket was not claimed (settled already: a replayed claim that its first process settled
-- after all).
local base, ticket, outcome = ARGV[1], ARGV[2], ARGV[3]
local key = base .. ':t:' .. ticket
local f = redis.call('HMGET', key, 'st', 'v', 'q')
if f[1] ~= 'c' then return 0 end
redis.call('ZREM', base .. ':claimed', ticket)
redis.call('HINCRBY', base .. ':inflight', f[2], -tonumber(f[3]))
if outcome == 'admitted' then
  redis.call('HSET', key, 'st', 'a', 'order', ARGV[4], 'until', ARGV[6])
  redis.call('ZADD', base .. ':admitted', redis.call('HGET', key, 'claimed'), ticket)
  redis.call('INCR', base .. ':admitted_count')
elseif outcome == 'back' then
  redis.call('HSET', key, 'st', 'w')
  redis.call('ZADD', base .. ':q:' .. f[2], ticket, ticket)
else
  redis.call('HSET', key, 'st', 'r', 'code', ARGV[5])
end
redis.call('PUBLISH', ARGV[7], '{"drop":' .. ARGV[8] .. ',"ticket":' .. ticket .. '}')
return 1
