-- Fence check, step 1: ONE upsert that records the token when it is >= the largest seen and keeps
-- the row unchanged otherwise. Either way InnoDB holds the row's exclusive lock until the caller's
-- transaction ends, so fenced writers of one resource are serialised in token order.
-- ? resource, ? token. (VALUES(col): MariaDB has no row alias; MySQL 8 still accepts it.)
insert into simba_fence (resource, token)
values (?, ?)
on duplicate key update token = if(token <= values(token), values(token), token)
