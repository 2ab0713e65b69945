-- Simba lease backend schema for MySQL 8 and MariaDB 10.11: four tables and one stored procedure.
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

-- The keep-alive in one round trip (CALL simba_keep_alive_v4(session id, lease ms)): renews the
-- session, or deletes it and its memberships when it has expired, and returns one result set of
-- (remaining ms, lease name, token, group name, before ms) rows: one per owned lease (group name
-- NULL) — one row with NULL name/token/group when it owns none — plus one per group the session is
-- a member of (lease name and token NULL); no row when the session is expired or unknown. Before
-- ms, on every row, is the time the session had left when the call found it, read after the row
-- lock and before the renewal (the client compares the database's clock with its own with it).
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
-- database during a rolling upgrade (simba_keep_alive_v3, which did not return the time found
-- left, simba_keep_alive_v2, which judged expiry with the clock of its UPDATE's start, and
-- simba_keep_alive_v1, which did not return the groups, are what older versions call; this script
-- no longer creates them and never drops them: drop them by hand once no older client runs). Needs MariaDB 10.1.3+ or MySQL 8.0.29+ (IF NOT EXISTS) and the CREATE
-- ROUTINE privilege; without it the backend falls back to separate statements.
-- The mysql client needs the DELIMITER lines; simba schema apply reads them the same way.
delimiter //
create procedure if not exists simba_keep_alive_v4(
    in p_session  char(32) character set ascii collate ascii_bin,
    in p_lease_ms bigint
)
    modifies sql data
    sql security invoker
    comment 'Simba keep-alive in one round trip, expiry judged after the row lock (sql/mysql/init-simba-mysql.sql)'
begin
    declare v_rows bigint default 0;
    declare v_before bigint default null;
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
    select max(expires_at) - cast(unix_timestamp(now(3)) * 1000 as signed)
    into v_before
    from simba_session
    where session_id = p_session;
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
    select v_remaining, l.name, l.token, null, v_before
    from (select 1 as one) as live
    left join simba_lease l on l.session_id = p_session
    where v_remaining is not null
    union all
    select v_remaining, null, null, m.group_name, v_before
    from simba_member m
    where m.session_id = p_session
      and v_remaining is not null;
end//
delimiter ;

-- The acquire in one round trip (CALL simba_acquire_v2(session id, lease name)). A free or new
-- lease is taken by ONE upsert (this session read LOCK IN SHARE MODE and alive, the row taken
-- only while its session_id is ''), then this session's remaining time is read by its
-- primary key: no read of the lease row first. Otherwise (the lease is held, by this session, by a
-- live or by an expired holder; this session is not alive; or the free row was taken meanwhile) the
-- upsert changes nothing and the acquire continues exactly as simba_acquire_v1 did: the plain read
-- of acquire-observe.sql, then — when the lease looks takeable — the upsert of acquire.sql, with
-- exactly their semantics (the fallback runs those two statements from the client). That upsert
-- reads this session and the observed holder's session row LOCK IN SHARE MODE, so a takeover is
-- serialised with that session's renewal; the token assignment comes first in its SET list. An
-- upsert that did not take the row (the holder changed between the two statements) is classified
-- by one more read. Returns one row: (remaining ms of this session, NULL when it is not alive;
-- the token, NULL when another live session holds the lease).
-- The lease row is not read inside the INSERT … SELECT itself: there InnoDB would take a shared
-- lock on it, and racing acquirers would deadlock upgrading it to the upsert's exclusive lock.
-- The name carries a version like the keep-alive's: simba_acquire_v1 (the read first, always) is
-- what the previous version calls; this script no longer creates it and never drops it (drop it by
-- hand once no older client runs). Same requirements (MariaDB 10.1.3+, MySQL 8.0.29+, CREATE
-- ROUTINE); without it the backend falls back to the two statements (two round trips).
delimiter //
create procedure if not exists simba_acquire_v2(
    in p_session char(32) character set ascii collate ascii_bin,
    in p_name    varchar(128) character set ascii collate ascii_bin
)
    modifies sql data
    sql security invoker
    comment 'Simba acquire in one round trip, a free lease in one upsert (sql/mysql/init-simba-mysql.sql)'
begin
    declare v_round int default 0;
    declare v_found int default 1;
    declare v_remaining bigint default null;
    declare v_holder char(32) character set ascii collate ascii_bin default null;
    declare v_token bigint default null;
    declare v_holder_alive int default 0;
    declare continue handler for not found set v_found = 0;
    insert into simba_lease (name, session_id, token)
    select p_name, me.session_id, 1
    from simba_session me
    where me.session_id = p_session
      and me.expires_at > cast(unix_timestamp(now(3)) * 1000 as signed)
    lock in share mode
    on duplicate key update
        token      = if(simba_lease.session_id = '', last_insert_id(simba_lease.token + 1), simba_lease.token),
        session_id = if(simba_lease.session_id = '', values(session_id), simba_lease.session_id);
    set v_token = case row_count() when 1 then 1 when 2 then last_insert_id() else null end;
    if v_token is not null then
        -- Taken. NOT FOUND (the session expired since the upsert) leaves v_remaining NULL: the
        -- reply is "expired", never a lease of a dead session.
        select me.expires_at - cast(unix_timestamp(now(3)) * 1000 as signed)
        into v_remaining
        from simba_session me
        where me.session_id = p_session
          and me.expires_at > cast(unix_timestamp(now(3)) * 1000 as signed);
        select v_remaining, if(v_remaining is null, null, v_token);
    else
        -- Not free: simba_acquire_v1's body, unchanged.
        acquire: loop
            set v_found = 1, v_remaining = null, v_holder = null, v_token = null, v_holder_alive = 0;
            select me.expires_at - cast(unix_timestamp(now(3)) * 1000 as signed),
                   l.session_id,
                   l.token,
                   h.session_id is not null
            into v_remaining, v_holder, v_token, v_holder_alive
            from simba_session me
            left join simba_lease l on l.name = p_name
            left join simba_session h
                   on h.session_id = l.session_id
                  and h.session_id <> me.session_id
                  and h.expires_at > cast(unix_timestamp(now(3)) * 1000 as signed)
            where me.session_id = p_session
              and me.expires_at > cast(unix_timestamp(now(3)) * 1000 as signed);
            if v_found = 0 then
                select null, null;
                leave acquire;
            end if;
            if v_holder = p_session and v_token is not null then
                select v_remaining, v_token;
                leave acquire;
            end if;
            if v_holder_alive <> 0 or v_round > 0 then
                select v_remaining, null;
                leave acquire;
            end if;
            set v_holder = coalesce(v_holder, '');
            insert into simba_lease (name, session_id, token)
            select p_name, me.session_id, 1
            from simba_session me
            left join simba_session h on h.session_id = v_holder
            where me.session_id = p_session
              and me.expires_at > cast(unix_timestamp(now(3)) * 1000 as signed)
              and (h.session_id is null or h.expires_at <= cast(unix_timestamp(now(3)) * 1000 as signed))
            lock in share mode
            on duplicate key update
                token      = if(simba_lease.session_id = '' or simba_lease.session_id = v_holder,
                                last_insert_id(simba_lease.token + 1), simba_lease.token),
                session_id = if(simba_lease.session_id = '' or simba_lease.session_id = v_holder,
                                values(session_id), simba_lease.session_id);
            case row_count()
                when 1 then
                    select v_remaining, 1;
                    leave acquire;
                when 2 then
                    select v_remaining, last_insert_id();
                    leave acquire;
                else
                    set v_round = v_round + 1;
            end case;
        end loop;
    end if;
end//
delimiter ;

-- Semaphore limits (Session::semaphore): one row per semaphore ever used, written once by its first
-- use and never changed or deleted. The permits themselves are rows of simba_lease (one per slot,
-- named 'simba.sem:<semaphore>:<slot>'). Added after the first release: running this script again
-- on an existing schema only adds this table.
create table if not exists simba_semaphore
(
    name    varchar(128) character set ascii collate ascii_bin not null primary key,
    permits bigint                                             not null comment 'the limit, fixed by the first use, never changed'
);
