select token from simba_fence where resource = ?
