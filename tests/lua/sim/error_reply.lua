-- redis.error_reply: the script's reply is an error.
return redis.error_reply('ERR simba: refused')
