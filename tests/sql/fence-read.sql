SELECT token FROM simba_fence_test WHERE resource = $1
