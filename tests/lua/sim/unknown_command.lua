-- A command the server does not know fails the script.
return redis.call('NOSUCHCOMMAND', 'x')
