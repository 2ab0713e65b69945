-- simba::fence table for MySQL 8 and MariaDB 10.11: per fenced resource, the largest fencing token
-- accepted. Run once (simba schema print --fence | mysql, or simba::fence::mysql::init); running it
-- again changes nothing. Names are case-sensitive (ascii_bin). Rows are never deleted by simba: a
-- resource's largest token must outlive every holder that could still write to it.

create table if not exists simba_fence
(
    resource varchar(128) character set ascii collate ascii_bin not null primary key,
    token    bigint                                             not null comment 'largest fencing token accepted'
) engine = InnoDB;
