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
