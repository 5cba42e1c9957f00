-- Keep a drop's news and publish it when it changed. ARGV: base, body (JSON), channel, drop id, now
-- (ms), what in it matters to every buyer at once (state and units), minimum ms between publications
-- of lesser changes. A change of what matters is published at once; a lesser one (the queue moving,
-- the rate) at most every that many ms, so a crowd's connections are not woken on every pass. Answers
-- 1 if it published.
local key = ARGV[1] .. ':news'
local last = redis.call('HMGET', key, 'published_body', 'published_major', 'published_at')
redis.call('HSET', key, 'body', ARGV[2], 'at', ARGV[5])
local now = tonumber(ARGV[5])
if last[1] == ARGV[2] then return 0 end
if last[2] == ARGV[6] and now - (tonumber(last[3]) or 0) < tonumber(ARGV[7]) then return 0 end
redis.call('HSET', key, 'published_body', ARGV[2], 'published_major', ARGV[6], 'published_at', now)
redis.call('PUBLISH', ARGV[3], '{"drop":' .. ARGV[4] .. ',"news":' .. ARGV[2] .. '}')
return 1
