-- The largest token a resource has accepted (after a refused fence-check.sql, whose row lock this
-- transaction holds). $1 resource.
select token from simba_fence where resource = $1
