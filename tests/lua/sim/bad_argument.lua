-- redis.call takes strings and numbers only.
return redis.call('GET', {})
