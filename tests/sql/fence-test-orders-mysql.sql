select token from simba_fence_test_order where resource = ? order by seq
