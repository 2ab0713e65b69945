-- simba::fence table for PostgreSQL 14+: per fenced resource, the largest fencing token accepted.
-- Run once (simba schema print --fence | psql, or simba::fence::postgres::init); running it again
-- changes nothing. Names are case-sensitive (the "C" collation). Rows are never deleted by simba: a
-- resource's largest token must outlive every holder that could still write to it.

create table if not exists simba_fence
(
    resource varchar(128) collate "C" not null primary key,
    token    bigint                   not null
);
