insert into simba_fence_test_attempt (resource, attempt, token) values (?, ?, ?)
