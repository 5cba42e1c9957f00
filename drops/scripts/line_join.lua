-- A place in a drop's line, once per buyer. ARGV: base, variant id, quantity, customer id ('' for a
-- guest), email, now (ms), then the buyer's identities (an account, a canonical email). Answers
-- {ticket, 'new' | 'existing'}, or {0, reason} when the line takes no one now.
local base = ARGV[1]
local identities = {}
for i = 7, #ARGV do identities[#identities + 1] = ARGV[i] end
for _, identity in ipairs(identities) do
  local ticket = redis.call('HGET', base .. ':who', identity)
  if ticket then
    for _, other in ipairs(identities) do redis.call('HSETNX', base .. ':who', other, ticket) end
    return {tonumber(ticket), 'existing'}
  end
end
local body = redis.call('HGET', base .. ':news', 'body')
if not body then return {0, 'not_open'} end
local news = cjson.decode(body)
if news.state ~= 'open' and news.state ~= 'sold_out' then return {0, news.state} end
if not news.variants[ARGV[2]] then return {0, 'unknown_variant'} end
local ticket = redis.call('INCR', base .. ':seq')
for _, identity in ipairs(identities) do redis.call('HSET', base .. ':who', identity, ticket) end
redis.call('HSET', base .. ':t:' .. ticket, 'v', ARGV[2], 'q', ARGV[3], 'cust', ARGV[4], 'email', ARGV[5],
  'st', 'w', 'joined', ARGV[6])
redis.call('ZADD', base .. ':q:' .. ARGV[2], ticket, ticket)
return {ticket, 'new'}
