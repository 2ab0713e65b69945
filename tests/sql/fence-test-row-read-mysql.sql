select body, fence_token from simba_fence_test_row where resource = ?
