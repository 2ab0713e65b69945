select attempt from simba_fence_test_attempt where resource = ? order by attempt
