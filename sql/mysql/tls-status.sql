-- The TLS protocol and cipher of this connection as the server sees it: two rows (Variable_name,
-- Value) for Ssl_version and Ssl_cipher; empty values mean the connection is not encrypted.
SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')
