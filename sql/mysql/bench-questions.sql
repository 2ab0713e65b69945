-- Benchmark only: statements the server has executed for clients so far (includes this one).
show global status like 'Questions'
