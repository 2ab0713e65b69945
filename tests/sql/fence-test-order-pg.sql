insert into simba_fence_test_order (resource, token) values ($1, $2)
