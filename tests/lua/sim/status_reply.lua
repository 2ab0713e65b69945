-- redis.status_reply: the script's reply is a status.
return redis.status_reply('FINE')
