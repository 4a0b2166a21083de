-- wrk script for bench/kv.py: PUTs and GETs against the walkit KV service or etcd 3.4's JSON
-- gateway, the same keys and values for both.
--
--   wrk -t2 -c64 -d5s --latency -s bench/kv_wrk.lua http://HOST:PORT -- MODE [VALUE_BYTES] [TAG] [KEYS]
--
-- MODE: kv-put, kv-get, etcd-put, etcd-get (etcd's default, linearizable range read) or
-- etcd-get-serializable. PUTs go to distinct keys ("TAG-<thread>-<n>", n counting up per wrk
-- thread); GETs read keys 2..KEYS+1 of an earlier PUT run with the same TAG, round robin, so
-- every GET finds its key (a miss is a 404 for the KV service, and counted). done() prints
-- one JSON line ("wrk-result ...") that bench/kv.py reads.

local b64chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

-- Base64 of a short string (etcd's gateway takes keys and values as base64 in JSON).
local function b64(data)
  return ((data:gsub(".", function(x)
    local r, b = "", x:byte()
    for i = 8, 1, -1 do r = r .. (b % 2 ^ i - b % 2 ^ (i - 1) > 0 and "1" or "0") end
    return r
  end) .. "0000"):gsub("%d%d%d?%d?%d?%d?", function(x)
    if #x < 6 then return "" end
    local c = 0
    for i = 1, 6 do c = c + (x:sub(i, i) == "1" and 2 ^ (6 - i) or 0) end
    return b64chars:sub(c + 1, c + 1)
  end) .. ({ "", "==", "=" })[#data % 3 + 1])
end

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local mode, value, tag, keys, value64
local n = 0

function init(args)
  mode = args[1] or "kv-put"
  value = string.rep("v", tonumber(args[2] or "100"))
  tag = args[3] or "k"
  keys = tonumber(args[4] or "1000")
  value64 = b64(value)
end

local function key_name()
  n = n + 1
  if mode == "kv-put" or mode == "etcd-put" then
    return tag .. "-" .. id .. "-" .. n
  end
  -- From 2: wrk calls request() once on its first thread to check the script, so key 1 of
  -- that thread was never sent.
  return tag .. "-" .. id .. "-" .. (n % keys + 2)
end

function request()
  local key = key_name()
  if mode == "kv-put" then
    return wrk.format("PUT", "/v1/kv/" .. key, nil, value)
  elseif mode == "kv-get" then
    return wrk.format("GET", "/v1/kv/" .. key)
  elseif mode == "etcd-put" then
    local body = '{"key":"' .. b64(key) .. '","value":"' .. value64 .. '"}'
    return wrk.format("POST", "/v3/kv/put", nil, body)
  elseif mode == "etcd-get" then
    return wrk.format("POST", "/v3/kv/range", nil, '{"key":"' .. b64(key) .. '"}')
  elseif mode == "etcd-get-serializable" then
    local body = '{"key":"' .. b64(key) .. '","serializable":true}'
    return wrk.format("POST", "/v3/kv/range", nil, body)
  end
  error("unknown mode " .. tostring(mode))
end

-- Globals: done() reads them from each thread with thread:get().
misses, not_2xx = 0, 0

-- wrk counts only statuses >= 400 as errors; a 3xx (a follower's redirect) or 1xx is not a
-- success either. Counting here costs wrk a Lua call per answer, the same for every system.
function response(status, headers, body)
  if status < 200 or status > 299 then
    not_2xx = not_2xx + 1
  elseif mode:sub(1, 8) == "etcd-get" and not body:find('"kvs"', 1, true) then
    misses = misses + 1 -- etcd answers a range read of a missing key with 200 and no "kvs"
  end
end

function done(summary, latency, requests)
  local total_misses, total_not_2xx = 0, 0
  for _, thread in ipairs(threads) do
    total_misses = total_misses + (thread:get("misses") or 0)
    total_not_2xx = total_not_2xx + (thread:get("not_2xx") or 0)
  end
  io.write(string.format(
    'wrk-result {"requests": %d, "duration_us": %d, "non_2xx": %d, "errors": %d, '
      .. '"misses": %d, "p50_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, total_not_2xx,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    total_misses, latency:percentile(50), latency:percentile(99), latency.max))
end
