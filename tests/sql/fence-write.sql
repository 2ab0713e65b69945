UPDATE simba_fence_test SET token = $2 WHERE resource = $1 AND token <= $2
