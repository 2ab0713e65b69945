-- The update_row convention: $1 the token (set by simba::fence), $2 the body, $3 the row.
update simba_fence_test_row set body = $2, fence_token = $1 where resource = $3 and fence_token <= $1
