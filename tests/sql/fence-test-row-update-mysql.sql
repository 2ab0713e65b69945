-- The update_row convention: :token the token (set by simba::fence), :body, :resource the row.
update simba_fence_test_row set body = :body, fence_token = :token where resource = :resource and fence_token <= :token
