INSERT INTO simba_fence_test (resource, token) VALUES ($1, 0) ON CONFLICT (resource) DO NOTHING
