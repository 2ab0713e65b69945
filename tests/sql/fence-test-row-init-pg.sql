insert into simba_fence_test_row (resource, body) values ($1, '')
