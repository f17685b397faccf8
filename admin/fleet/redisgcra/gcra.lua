-- Sluice fleet mode: one GCRA bucket operation, atomic in Redis.
--
-- The bucket is stored as its theoretical arrival time (TAT), an integer of
-- microseconds on Redis' own clock (TIME): the moment the bucket is full
-- again. Every number is an integer below 2^53, so Lua's doubles hold them
-- exactly and the bound "admitted <= burst + rate * t" has no float drift.
--
-- KEYS[1]  the bucket, sluice:{<domain>:<rule>:<id>}
-- ARGV[1]  amount in microseconds: the cost of the tokens asked for (take)
--          or charged (charge), or the credit of the tokens given back
--          (return); integer >= 0
-- ARGV[2]  tau in microseconds: the burst as time (burst / rate); for a
--          charge, the most backlog it may leave: tau plus the debt allowed
-- ARGV[3]  "take", "return", "charge" or "block"
-- ARGV[4]  a block only: its length in microseconds (block_seconds as
--          time), integer > 0
--
-- Returns {allowed (1 or 0), backlog, now}: backlog = TAT - now after the
-- call, the time until the bucket is full again; now = Redis TIME in us.
-- A charge returns a fourth value: the microseconds it added to the TAT.
-- A block answers allowed 0 when, and only when, it put the block in
-- place (ARGV[1] is the cost of the request it was sent for).
--
-- The key expires exactly when the bucket is full again (PX backlog,
-- rounded up to the millisecond): a missing key and a full bucket are the
-- same state, so an idle bucket costs no memory, and a slow bucket is never
-- reset early by a fixed expiry.

-- Redis < 5 replicates scripts verbatim, which forbids writes after TIME;
-- replicating the effects instead is the default from Redis 5 on.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local amount = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '') or now
if tat < now then tat = now end

local function store(newtat)
  if newtat <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], string.format('%.0f', newtat),
      'PX', string.format('%.0f', math.ceil((newtat - now) / 1000)))
  end
end

if ARGV[3] == 'return' then
  -- A credit moves the TAT back, never before now: the bucket cannot hold
  -- more than its burst.
  local newtat = tat - amount
  if newtat < now then newtat = now end
  store(newtat)
  return {1, newtat - now, now}
end

if ARGV[3] == 'charge' then
  -- Unconditional, into debt: a charge pays for tokens already spent (a
  -- cost the response reported), so it is never refused. The debt is
  -- capped (ARGV[2]); a TAT already past the cap (a lowered burst or
  -- max_debt) stays where it is: a charge never gives tokens back.
  local newtat = math.min(tat + amount, now + tau)
  if newtat < tat then newtat = tat end
  if newtat > tat then store(newtat) end
  return {1, newtat - now, now, newtat - tat}
end

if ARGV[3] == 'block' then
  -- A request costing ARGV[1] is about to ask, and the rule blocks the
  -- clients it refuses: a bucket that cannot pay it now is put the
  -- block's length below empty. A bucket already below empty (in debt,
  -- or blocked: a refusal during a block never lengthens it) or that can
  -- pay is left as it is. A repeated block therefore changes nothing.
  -- The backlog is clamped to 2^52 us, as every duration.
  if tat - now > tau or tat + amount - now <= tau then
    return {1, tat - now, now}
  end
  local hold = tau + tonumber(ARGV[4])
  if hold > 4503599627370496 then hold = 4503599627370496 end
  store(now + hold)
  return {0, hold, now}
end

-- All or nothing: the tokens are granted only if all of them fit. Asking
-- for none always succeeds (a query), even when a lowered burst left the
-- TAT beyond tau.
local newtat = tat + amount
if amount > 0 and newtat - now > tau then
  return {0, tat - now, now}
end
if amount > 0 then store(newtat) end
return {1, newtat - now, now}
