-- Test asset (tests/sql_backend.rs::mysql_acquire_with_only_the_old_procedure): the acquire procedure
-- of the previous version, simba_acquire_v1, exactly as its init-simba-mysql.sql created it
-- (without delimiter lines: sent as one statement).
create procedure simba_acquire_v1(
    in p_session char(32) character set ascii collate ascii_bin,
    in p_name    varchar(128) character set ascii collate ascii_bin
)
    modifies sql data
    sql security invoker
    comment 'Simba acquire in one round trip (sql/mysql/init-simba-mysql.sql)'
begin
    declare v_round int default 0;
    declare v_found int default 1;
    declare v_remaining bigint default null;
    declare v_holder char(32) character set ascii collate ascii_bin default null;
    declare v_token bigint default null;
    declare v_holder_alive int default 0;
    declare continue handler for not found set v_found = 0;
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
end
