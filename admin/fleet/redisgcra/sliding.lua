-- Sluice fleet mode: one sliding window take, atomic in Redis.
--
-- A global sliding window keeps one counter per window, as a fixed window
-- does (sluice:{<domain>:<rule>:<id>}:<start ms>), read two at a time: the
-- current window's and the previous one's. The estimate of the use in the
-- last window is
--
--   estimate = prev * (1 - f) + cur,   f = (now - start) / length
--
-- with f on the admin's clock (the admin chose the window on it, and
-- passes its now and the window's bounds). A take of n is granted only if
-- estimate + n <= limit, all or nothing, and counts n in cur. Counters
-- expire one window after their end (they are the next window's prev).
-- Returns go to window.lua: they decrement the counter of the window their
-- lease was counted in, never creating it.
--
-- KEYS[1]  the current window's counter
-- KEYS[2]  the previous window's counter (same hash tag: same slot)
-- ARGV[1]  amount: whole requests asked for, >= 0
-- ARGV[2]  limit: the most the estimate admits, >= 1
-- ARGV[3]  the current counter's expiry, unix ms (PEXPIREAT)
-- ARGV[4]  the admin's now, unix ms
-- ARGV[5]  the current window's start, unix ms
-- ARGV[6]  the window's length, ms
--
-- Returns {allowed (1 or 0), used, now in us}: used is the limit minus
-- the whole requests that still fit (the estimate after the call, rounded
-- up).

if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local amount = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local prev = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local f = (tonumber(ARGV[4]) - tonumber(ARGV[5])) / tonumber(ARGV[6])
if f < 0 then f = 0 elseif f > 1 then f = 1 end
local estimate = prev * (1 - f) + cur

local allowed = 1
if amount > 0 then
  -- The epsilon absorbs float rounding of prev * (1 - f) only.
  if estimate + amount <= limit + 1e-9 then
    redis.call('SET', KEYS[1], string.format('%.0f', cur + amount), 'PXAT', ARGV[3])
    estimate = estimate + amount
  else
    allowed = 0
  end
end
local fits = math.floor(limit - estimate + 1e-9)
if fits < 0 then fits = 0 end
return {allowed, limit - fits, now}
