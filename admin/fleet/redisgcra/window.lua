-- Sluice fleet mode: one window counter operation, atomic in Redis.
--
-- A global fixed window or quota is one counter per window (period):
-- the requests the fleet leased in it. Its key names the window's start,
-- sluice:{<domain>:<rule>:<id>}:<start ms>, and expires at the window's
-- end, so a past window costs no memory and is never read again.
--
-- KEYS[1]  the counter
-- ARGV[1]  amount: whole requests asked for (take), given back (return) or
--          charged (charge), >= 0
-- ARGV[2]  limit: the most the window admits, >= 1; for a charge, the most
--          it may count: the limit plus the debt allowed
-- ARGV[3]  the window's end, unix ms (PEXPIREAT)
-- ARGV[4]  "take", "return" or "charge"
--
-- Returns {allowed (1 or 0), count after the call, now in us}. A charge
-- returns a fourth value: the requests it added to the count.

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local amount = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local count = tonumber(redis.call('GET', KEYS[1]) or '0') or 0

if ARGV[4] == 'return' then
  -- Only a counter that exists takes a return (a past window has expired:
  -- its unused leases lapse), and never below zero.
  if count == 0 then return {1, 0, now} end
  local after = count - amount
  if after < 0 then after = 0 end
  redis.call('SET', KEYS[1], string.format('%.0f', after), 'KEEPTTL')
  return {1, after, now}
end

if ARGV[4] == 'charge' then
  -- Unconditional: a charge counts requests (tokens) already spent, a
  -- cost the response reported, so it is never refused. It counts up to
  -- its cap (ARGV[2]); a count already past it (a lowered limit) stays
  -- where it is: a charge never gives anything back. The counter is
  -- created as by a take, expiring at the window's end.
  local after = math.min(count + amount, limit)
  if after < count then after = count end
  if after > count then
    redis.call('SET', KEYS[1], string.format('%.0f', after), 'PXAT', ARGV[3])
  end
  return {1, after, now, after - count}
end

-- All or nothing: granted only if every request asked for fits.
if amount > 0 and count + amount > limit then
  return {0, count, now}
end
if amount > 0 then
  redis.call('SET', KEYS[1], string.format('%.0f', count + amount), 'PXAT', ARGV[3])
end
return {1, count + amount, now}
