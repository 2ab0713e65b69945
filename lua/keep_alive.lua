-- simba: renew a session in one script (standalone only). Its leases need no write: a term lives
-- while its session key does (see acquire.lua), so the work does not grow with the leases held
-- (but for the check below, which covers a small index whole: at most hash-max-listpack-entries).
-- The session's group memberships are renewed one by one (each group is its own sorted set).
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:terms, KEYS[3] simba:session:{sid}:groups
-- ARGV[1] session id, ARGV[2] lease duration in ms, ARGV[3] the `gen` of the lease index the
-- client last received ('' for none), ARGV[4..] pairs (name, token) of terms the client
-- abandoned: released here, never reported.
-- Returns {-1} when the session is gone, else {remaining_ms, gen, terms, {group1, group2, ...},
-- before_ms} (before_ms: the session's PTTL when the script found it, before renewing):
-- terms is the lease index {name1, token1, name2, token2, ...} (the leases the session owns)
-- when its gen differs from ARGV[3], else false (nil: unchanged since that listing); the groups
-- are those the session is still a member of (score present and unexpired; the others leave the
-- index and are not listed).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sid = ARGV[1]
local d = tonumber(ARGV[2])
-- PTTL, not EXISTS, as every other session check: in the millisecond of its expiry the key still
-- exists but its PTTL is 0, which acquire, join and session_info already take as gone.
local before = redis.call('PTTL', KEYS[1])
if before <= 0 then
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], d)
for i = 4, #ARGV - 1, 2 do
  local lease = 'simba:lease:{' .. ARGV[i] .. '}'
  local h = redis.call('HMGET', lease, 'session', 'token')
  if h[1] == sid and h[2] == ARGV[i + 1] then
    redis.call('HSET', lease, 'session', '')
    redis.call('PUBLISH', lease, 'released')
  end
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('HINCRBY', KEYS[1], 'gen', 1)
  end
end
-- Writes that bypass simba (a lease hash deleted or rewritten by hand, or evicted) are caught by
-- checking the index entries in rotation: HSCAN from the cursor the previous renewal stopped at
-- (field `scan` of the session hash), wrapping to 0, until at least 16 entries were checked or
-- the whole index was. HSCAN returns every entry present for a whole rotation at least once, so
-- with N entries a lost one is dropped within ceil(N/16) renewals (one more if releases shrank the
-- index's table during the rotation: entries of one bucket may come again). An index small enough
-- for a listpack (hash-max-listpack-entries, 512 by default, entries of at most 64 bytes) comes
-- whole from one HSCAN whatever its COUNT: it is checked whole, at every renewal. At most 8 HSCAN
-- calls (each visits at most 10 x COUNT buckets), so an index left sparse (no shrink while a fork
-- runs) costs a bounded renewal. A lost entry leaves the index.
local stored = redis.call('HGET', KEYS[1], 'scan')
local cursor = stored or '0'
-- Only HSCAN's own cursors are stored; anything else (a hand edit) starts the rotation over.
if not string.match(cursor, '^%d+$') or #cursor > 19 then
  cursor = '0'
end
local zeros = (cursor == '0') and 1 or 0
local checked = 0
for _ = 1, 8 do
  local page = redis.call('HSCAN', KEYS[2], cursor, 'COUNT', 16)
  cursor = page[1]
  local entries = page[2]
  for i = 1, #entries - 1, 2 do
    local h = redis.call('HMGET', 'simba:lease:{' .. entries[i] .. '}', 'session', 'token')
    if h[1] ~= sid or h[2] ~= entries[i + 1] then
      redis.call('HDEL', KEYS[2], entries[i])
      redis.call('HINCRBY', KEYS[1], 'gen', 1)
    end
  end
  checked = checked + #entries / 2
  if cursor == '0' then
    zeros = zeros + 1
  end
  if checked >= 16 or zeros >= 2 then
    break
  end
end
if cursor ~= stored then
  redis.call('HSET', KEYS[1], 'scan', cursor)
end
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
local terms = false
if gen ~= ARGV[3] then
  terms = redis.call('HGETALL', KEYS[2])
end
local groups = {}
local expires = now + d
for _, group in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local key = 'simba:group:{' .. group .. '}'
  local score = redis.call('ZSCORE', key, sid)
  if score and tonumber(score) > now then
    redis.call('ZADD', key, expires, sid)
    groups[#groups + 1] = group
  else
    if score then
      redis.call('ZREM', key, sid)
    end
    redis.call('SREM', KEYS[3], group)
  end
end
redis.call('PEXPIRE', KEYS[2], 2 * d)
redis.call('PEXPIRE', KEYS[3], 2 * d)
return {d, gen, terms, groups, before}
