-- Sluice fleet mode: one rolling window operation, atomic in Redis.
--
-- A global rolling window admits at most limit in its last N sub-periods
-- (and, with a cap, at most max per period in one). Its state is one hash
-- per identity, sluice:{<domain>:<rule>:<id>}:rolling, with one field per
-- sub-period: its start in unix ms, valued the requests leased in it.
-- A take deletes the fields that left the window a window ago or more;
-- those that left it since stay, unsummed, for an admin whose clock is
-- behind (its window may still hold them). The key expires when its
-- newest field leaves the window.
--
-- KEYS[1]  the hash
-- ARGV[1]  amount: whole requests asked for (take) or given back (return), >= 0
-- ARGV[2]  limit: the most the window's sum admits, >= 1
-- ARGV[3]  max per period: the most one sub-period admits, 0 for no cap
-- ARGV[4]  the sub-period (field) counted in: its start, unix ms
-- ARGV[5]  the start of the oldest sub-period still in the window, unix ms
-- ARGV[6]  the key's expiry, unix ms (PEXPIREAT), on a take
-- ARGV[7]  "take" or "return"
--
-- Returns {allowed (1 or 0), used, now in us}: used is the limit minus the
-- whole requests that still fit (the sum, or the sub-period's count when
-- its cap is tighter).

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local amount = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local field = ARGV[4]
local oldest = tonumber(ARGV[5])

-- A take's field is the newest sub-period, field - oldest a window less
-- one sub-period: fields older than oldest by that much are gone for any
-- admin within that of this one's clock.
local take = ARGV[7] ~= 'return' and amount > 0
local drop = oldest - (tonumber(field) - oldest)
if drop > oldest then drop = oldest end

local all = redis.call('HGETALL', KEYS[1])
local sum, cur, stale = 0, 0, {}
for i = 1, #all, 2 do
  local start = tonumber(all[i])
  local c = tonumber(all[i + 1]) or 0
  if start == nil or (take and start < drop) then
    stale[#stale + 1] = all[i]
  elseif start >= oldest then
    sum = sum + c
    if all[i] == field then cur = c end
  end
end
if #stale > 0 then redis.call('HDEL', KEYS[1], unpack(stale)) end

local allowed = 1
if ARGV[7] == 'return' then
  -- Only a sub-period still in the window, with a count, takes a return
  -- (an older one's unused leases lapse), and never below zero.
  local back = amount
  if back > cur then back = cur end
  if back > 0 and tonumber(field) >= oldest then
    redis.call('HINCRBY', KEYS[1], field, -back)
    sum, cur = sum - back, cur - back
  end
elseif amount > 0 then
  -- All or nothing: granted only if every request asked for fits.
  if sum + amount > limit or (cap > 0 and cur + amount > cap) then
    allowed = 0
  else
    redis.call('HINCRBY', KEYS[1], field, amount)
    redis.call('PEXPIREAT', KEYS[1], ARGV[6])
    sum, cur = sum + amount, cur + amount
  end
end
local fits = limit - sum
if cap > 0 and cap - cur < fits then fits = cap - cur end
if fits < 0 then fits = 0 end
return {allowed, limit - fits, now}
