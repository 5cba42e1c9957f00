-- Claim the heads of a drop's line for admission. ARGV: base, now (ms), admissions per second, burst,
-- stale (ms), then pairs of variant id and units free now. First the claims a dead process left
-- unsettled for longer than stale (claimed again, marked 1: their holds may exist already); then the
-- oldest ticket among the heads of the variants with units free, one per token of the bucket. A head
-- that wants more units than are free holds its variant's queue: no one behind it passes it.
-- Answers a list of {ticket, variant id, quantity, customer id, email, replay}.
local base, now = ARGV[1], tonumber(ARGV[2])
local rate, burst, stale = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {}
for _, ticket in ipairs(redis.call('ZRANGEBYSCORE', base .. ':claimed', '-inf', now - stale)) do
  redis.call('ZADD', base .. ':claimed', now, ticket)
  local f = redis.call('HMGET', base .. ':t:' .. ticket, 'v', 'q', 'cust', 'email')
  out[#out + 1] = {tonumber(ticket), tonumber(f[1]), tonumber(f[2]), f[3], f[4], 1}
end
local bucket = redis.call('HMGET', base .. ':bucket', 'tokens', 'at')
local tokens, at = tonumber(bucket[1]) or burst, tonumber(bucket[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local free, variants = {}, {}
for i = 6, #ARGV, 2 do
  local variant = ARGV[i]
  free[variant] = tonumber(ARGV[i + 1]) - tonumber(redis.call('HGET', base .. ':inflight', variant) or '0')
  variants[#variants + 1] = variant
end
while tokens >= 1 do
  local best, best_ticket = nil, nil
  for _, variant in ipairs(variants) do
    if free[variant] > 0 then
      local head = redis.call('ZRANGE', base .. ':q:' .. variant, 0, 0)
      if head[1] and (best_ticket == nil or tonumber(head[1]) < best_ticket) then
        best, best_ticket = variant, tonumber(head[1])
      end
    end
  end
  if not best then break end
  local key = base .. ':t:' .. best_ticket
  local f = redis.call('HMGET', key, 'q', 'cust', 'email')
  local quantity = tonumber(f[1])
  if quantity > free[best] then
    free[best] = 0
  else
    redis.call('ZREM', base .. ':q:' .. best, best_ticket)
    redis.call('HSET', key, 'st', 'c', 'claimed', redis.call('INCR', base .. ':claims'))
    redis.call('ZADD', base .. ':claimed', now, best_ticket)
    redis.call('HINCRBY', base .. ':inflight', best, quantity)
    free[best] = free[best] - quantity
    tokens = tokens - 1
    out[#out + 1] = {best_ticket, tonumber(best), quantity, f[2], f[3], 0}
  end
end
redis.call('HSET', base .. ':bucket', 'tokens', tostring(tokens), 'at', now)
return out
