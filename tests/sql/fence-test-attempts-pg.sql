select attempt from simba_fence_test_attempt where resource = $1 order by attempt
