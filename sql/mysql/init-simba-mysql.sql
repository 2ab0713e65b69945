-- Simba lease backend schema for MySQL 8 and MariaDB 10.11: three tables and one stored procedure.
-- Run once (simba schema apply, or mysql < init-simba-mysql.sql); running it again changes nothing.
-- Names are case-sensitive: key columns use binary collations (ascii_bin, utf8mb4_bin).

create table if not exists simba_session
(
    session_id char(32) character set ascii collate ascii_bin not null primary key,
    expires_at bigint                                        not null comment 'database time, epoch ms',
    metadata   varchar(1024) character set utf8mb4 collate utf8mb4_bin not null default '',
    index idx_session_expires (expires_at)
);

create table if not exists simba_lease
(
    name       varchar(128) character set ascii collate ascii_bin not null primary key,
    session_id char(32) character set ascii collate ascii_bin     not null default '' comment 'empty = free',
    token      bigint                                             not null comment 'term number, never reset',
    index idx_lease_session (session_id)
);

create table if not exists simba_member
(
    group_name varchar(128) character set utf8mb4 collate utf8mb4_bin not null,
    session_id char(32) character set ascii collate ascii_bin not null,
    primary key (group_name, session_id),
    index idx_member_session (session_id)
);

-- The keep-alive in one round trip (CALL simba_keep_alive_v3(session id, lease ms)): renews the
-- session, or deletes it and its memberships when it has expired, and returns one result set of
-- (remaining ms, lease name, token, group name) rows: one per owned lease (group name NULL) — one
-- row with NULL name/token/group when it owns none — plus one per group the session is a member
-- of (lease name and token NULL); no row when the session is expired or unknown.
-- Expiry is judged with database time read AFTER the session row's lock is granted: the first
-- statement of the transaction locks the row (waiting for a takeover that holds it in share mode)
-- and the later statements each read a fresh NOW(3). A single UPDATE would not do: MySQL 8 fixes
-- NOW() when the statement starts, before it waits for the lock, and could renew a session that
-- expired meanwhile and whose lease the takeover just took. The final read runs after the commit
-- (autocommit, a fresh snapshot): it sees every takeover, join and leave that committed before the
-- renewal (exactly what the fallback reads: keep-alive-lock.sql, keep-alive.sql,
-- keep-alive-read.sql in one transaction). Any error rolls the transaction back before it is
-- passed on, so no lock outlives a failed call.
-- The name carries a version: a changed body gets a new name, so old and new clients can share a
-- database during a rolling upgrade (simba_keep_alive_v2, which judged expiry with the clock of
-- its UPDATE's start, and simba_keep_alive_v1, which did not return the groups, are what older
-- versions call; this script no longer creates them and never drops them: drop them by hand once
-- no older client runs). Needs MariaDB 10.1.3+ or MySQL 8.0.29+ (IF NOT EXISTS) and the CREATE
-- ROUTINE privilege; without it the backend falls back to separate statements.
-- The mysql client needs the DELIMITER lines; simba schema apply reads them the same way.
delimiter //
create procedure if not exists simba_keep_alive_v3(
    in p_session  char(32) character set ascii collate ascii_bin,
    in p_lease_ms bigint
)
    modifies sql data
    sql security invoker
    comment 'Simba keep-alive in one round trip, expiry judged after the row lock (sql/mysql/init-simba-mysql.sql)'
begin
    declare v_rows bigint default 0;
    declare v_remaining bigint default null;
    declare exit handler for sqlexception
    begin
        rollback;
        resignal;
    end;
    start transaction;
    select count(*)
    into v_rows
    from simba_session
    where session_id = p_session
    for update;
    update simba_session
    set expires_at = cast(unix_timestamp(now(3)) * 1000 as signed) + p_lease_ms
    where session_id = p_session
      and expires_at > cast(unix_timestamp(now(3)) * 1000 as signed);
    select max(expires_at) - cast(unix_timestamp(now(3)) * 1000 as signed)
    into v_remaining
    from simba_session
    where session_id = p_session
      and expires_at > cast(unix_timestamp(now(3)) * 1000 as signed);
    if v_remaining is null then
        delete from simba_session
        where session_id = p_session
          and expires_at <= cast(unix_timestamp(now(3)) * 1000 as signed);
        delete from simba_member
        where session_id = p_session;
    end if;
    commit;
    select v_remaining, l.name, l.token, null
    from (select 1 as one) as live
    left join simba_lease l on l.session_id = p_session
    where v_remaining is not null
    union all
    select v_remaining, null, null, m.group_name
    from simba_member m
    where m.session_id = p_session
      and v_remaining is not null;
end//
delimiter ;
