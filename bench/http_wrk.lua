-- wrk script of bench/http_wrk.py: each request POSTs a cart as JSON with a fresh Idempotency-Key.
--
-- Environment, read by every wrk thread:
--   WRK_RUN    a string unique to the run: the Idempotency-Keys are "<WRK_RUN>-<thread>-<request>"
--   WRK_TOKEN  the API token sent as "Authorization: Token <WRK_TOKEN>"; empty: no Authorization header
--   WRK_ITEMS  the cell's SKUs as "sku=variant_id" pairs separated by commas
--   WRK_LINES  SKUs per cart, distinct, picked at random among WRK_ITEMS in random order
--   WRK_FIELD  what a line names: "sku" (the order API, the checkout) or "variant_id" (the floors)
--   WRK_EXTRA  JSON members sent after the items, each with its leading comma (the order's address and
--              shipping method); empty: none
--
-- At the end it prints one line, "WRK_RESULT <json>": requests, duration, socket errors, latency
-- percentiles (microseconds) and the answers by HTTP status.

local threads = {}

function setup(thread)
   table.insert(threads, thread)
   thread:set("thread_id", #threads)
end

function init(args)
   run = os.getenv("WRK_RUN") or "run"
   field = os.getenv("WRK_FIELD") or "sku"
   extra = os.getenv("WRK_EXTRA") or ""
   lines = tonumber(os.getenv("WRK_LINES") or "1")
   items = {}
   for sku, variant_id in string.gmatch(os.getenv("WRK_ITEMS") or "", "([^=,]+)=(%d+)") do
      local value = field == "sku" and ('"' .. sku .. '"') or variant_id
      table.insert(items, '{"' .. field .. '": ' .. value .. ', "quantity": 1}')
   end
   headers = {["Content-Type"] = "application/json"}
   local token = os.getenv("WRK_TOKEN") or ""
   if token ~= "" then
      headers["Authorization"] = "Token " .. token
   end
   math.randomseed(os.time() + thread_id * 7919)
   sent = 0
   statuses = {}
end

local function cart()
   if #items == 1 then
      return '{"items": [' .. items[1] .. ']' .. extra .. '}'
   end
   -- A partial Fisher-Yates shuffle: the first `lines` items are the cart.
   local picked = {}
   for i = 1, #items do
      picked[i] = items[i]
   end
   for i = 1, lines do
      local j = math.random(i, #items)
      picked[i], picked[j] = picked[j], picked[i]
   end
   return '{"items": [' .. table.concat(picked, ", ", 1, lines) .. ']' .. extra .. '}'
end

function request()
   sent = sent + 1
   headers["Idempotency-Key"] = run .. "-" .. thread_id .. "-" .. sent
   return wrk.format("POST", nil, headers, cart())
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
   local counts = {}
   for _, thread in ipairs(threads) do
      for status, count in pairs(thread:get("statuses")) do
         counts[status] = (counts[status] or 0) + count
      end
   end
   local answers = {}
   for status, count in pairs(counts) do
      table.insert(answers, string.format('"%d": %d', status, count))
   end
   local errors = summary.errors
   io.write(string.format(
      'WRK_RESULT {"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, "timeout": %d,'
         .. ' "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, "statuses": {%s}}\n',
      summary.requests, summary.duration, errors.connect, errors.read, errors.write, errors.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
      table.concat(answers, ", ")
   ))
end
