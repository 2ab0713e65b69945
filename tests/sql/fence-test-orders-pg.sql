select token from simba_fence_test_order where resource = $1 order by seq
