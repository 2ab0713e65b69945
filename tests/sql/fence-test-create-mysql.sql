-- Tables of the simba::fence tests (shared server: rows are keyed by a random resource name).
-- attempt: one row per fenced attempt, written BEFORE the fence check (present only if it committed).
-- orders: one row per committed attempt, written AFTER the check (under the fence row lock), in seq order.
-- row: a resource that carries its own fence_token (the one-statement update_row form).
create table if not exists simba_fence_test_attempt (resource varchar(128) not null, attempt bigint not null, token bigint not null, primary key (resource, attempt));
create table if not exists simba_fence_test_order (seq bigint not null auto_increment primary key, resource varchar(128) not null, token bigint not null, index (resource));
create table if not exists simba_fence_test_row (resource varchar(128) primary key, body text not null, fence_token bigint not null default 0);
