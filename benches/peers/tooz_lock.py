"""Peer measurement for section 8 of the simba benchmark: a tooz lock, used as its documentation
shows, taken and freed without waiting (acquire(blocking=False) + release()), on the same server.

    python3 benches/peers/tooz_lock.py URL NAME OPS

Prints one line: the OPS per-op latencies in nanoseconds, space-separated (the benchmark computes
the percentiles, as for its own samples). Exits 2 with a message when tooz or its driver is missing
(`pip install tooz pymysql`), 1 when a lock is busy or the server fails.
"""

import sys
import time

try:
    from tooz import coordination
except ImportError as e:  # the benchmark shows this line instead of the peer's row
    print(f"tooz is not installed ({e}): pip install tooz pymysql", file=sys.stderr)
    sys.exit(2)


def main() -> int:
    if len(sys.argv) != 4:
        print("usage: tooz_lock.py URL NAME OPS", file=sys.stderr)
        return 1
    url, name, ops = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
    coordinator = coordination.get_coordinator(url, b"simba-bench-peer")
    coordinator.start()
    try:
        lock = coordinator.get_lock(name)
        samples = []
        for _ in range(ops):
            t = time.perf_counter_ns()
            if not lock.acquire(blocking=False):
                print(f"tooz lock {name!r} is busy", file=sys.stderr)
                return 1
            lock.release()
            samples.append(time.perf_counter_ns() - t)
        print(" ".join(map(str, samples)))
        return 0
    finally:
        coordinator.stop()


if __name__ == "__main__":
    sys.exit(main())
