-- Every connection works in UTC, so NOW(3) and UNIX_TIMESTAMP agree exactly (no DST ambiguity).
SET time_zone = '+00:00'
