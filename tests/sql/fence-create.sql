-- A fenced resource for the real-fault tests: it accepts a write only with a token at least as
-- large as the largest it has seen.
CREATE TABLE IF NOT EXISTS simba_fence_test (resource text PRIMARY KEY, token bigint NOT NULL)
