-- simba::fence: the check that runs first in every fenced Redis script (standalone and Cluster).
-- KEYS[1] the resource's fence key (simba:fence:{resource}), ARGV[1] the token (decimal, no
-- leading zeros; compared as a string, so every u64 is exact). A token smaller than the one
-- recorded gets the error reply "SIMBA_FENCE_STALE <seen>" and nothing is written. Otherwise the
-- token is recorded (a larger one replaces it, an equal one keeps it) and KEYS[1] and ARGV[1] are
-- removed, so the body that follows sees only its own keys and arguments. The fence key has no
-- TTL: it must outlive every holder that could still write.
local fence_token = ARGV[1]
local fence_seen = redis.call('GET', KEYS[1])
if fence_seen then
    if not string.match(fence_seen, '^[1-9][0-9]*$') then
        return redis.error_reply('SIMBA_FENCE_CORRUPT the fence key ' .. KEYS[1] .. ' does not hold a token')
    end
    if #fence_seen > #fence_token or (#fence_seen == #fence_token and fence_seen > fence_token) then
        return redis.error_reply('SIMBA_FENCE_STALE ' .. fence_seen)
    end
end
if fence_seen ~= fence_token then
    redis.call('SET', KEYS[1], fence_token)
end
table.remove(KEYS, 1)
table.remove(ARGV, 1)
