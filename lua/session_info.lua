-- simba (Cluster): a session's remaining time and metadata, on the session's slot.
-- KEYS[1] simba:session:{sid}
-- Returns {} when the session is gone, else {remaining_ms, metadata}.
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  return {}
end
return {pttl, redis.call('HGET', KEYS[1], 'metadata') or ''}
