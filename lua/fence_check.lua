-- simba::fence body after fence_prelude.lua: the check alone (records the token, writes nothing else).
return 1
