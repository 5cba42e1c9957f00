-- A place as its buyer is told it. ARGV: base, ticket. Answers {state, variant id, places ahead for the
-- same variant, order number, refusal code, when the hold lapses (ms), quantity}, or nil for no such ticket.
local base, ticket = ARGV[1], ARGV[2]
local f = redis.call('HMGET', base .. ':t:' .. ticket, 'st', 'v', 'order', 'code', 'until', 'q')
if not f[1] then return nil end
local ahead = 0
if f[1] == 'w' then ahead = redis.call('ZCOUNT', base .. ':q:' .. f[2], '-inf', '(' .. ticket) end
return {f[1], f[2], ahead, f[3] or '', f[4] or '', f[5] or '0', f[6]}
