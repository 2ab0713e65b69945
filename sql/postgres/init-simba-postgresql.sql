-- Simba lease backend schema for PostgreSQL 14+.
-- Run once (simba schema apply, or psql -f init-simba-postgresql.sql); running it again changes nothing.
-- Names are case-sensitive: every key column uses the "C" collation (byte order, like MySQL's *_bin).

create table if not exists simba_session
(
    session_id char(32) collate "C" not null primary key,
    expires_at bigint               not null,
    metadata   varchar(1024)        not null default ''
);
create index if not exists idx_session_expires on simba_session (expires_at);
comment on column simba_session.expires_at is 'database time, epoch ms';

create table if not exists simba_lease
(
    name       varchar(128) collate "C" not null primary key,
    session_id char(32) collate "C"     not null default '',
    token      bigint                   not null
);
create index if not exists idx_lease_session on simba_lease (session_id);
comment on column simba_lease.session_id is 'empty = free';
comment on column simba_lease.token is 'term number, never reset';

create table if not exists simba_member
(
    group_name varchar(128) collate "C" not null,
    session_id char(32) collate "C"     not null,
    primary key (group_name, session_id)
);
create index if not exists idx_member_session on simba_member (session_id);

-- Semaphore limits (Session::semaphore): one row per semaphore ever used, written once by its first
-- use and never changed or deleted. The permits themselves are rows of simba_lease (one per slot,
-- named 'simba.sem:<semaphore>:<slot>'). Added after the first release: running this script again
-- on an existing schema only adds this table.
create table if not exists simba_semaphore
(
    name    varchar(128) collate "C" not null primary key,
    permits bigint                   not null check (permits > 0)
);
comment on column simba_semaphore.permits is 'the limit, fixed by the first use, never changed';
