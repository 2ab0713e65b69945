-- Redis's Lua -> reply rules: numbers truncate, false -> nil, true -> 1, a table stops at its
-- first nil, nested tables are arrays.
return {1, 2.7, -2.7, 'a', false, true, {3, {4, 'x'}, 0.5}, nil, 5}
