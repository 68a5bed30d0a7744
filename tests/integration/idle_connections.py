"""Opens N TCP connections to host:port, at most R a second, and holds them, sending nothing,
until stdin closes.

Run as a child process by the connection-flood test: one process may hold only as many sockets as
its open-file limit allows, so the test spreads its idle connections over several of these.
Prints "opened <n>" once every connection is made (or failed: a refused or reset connect counts
as made, the node having shed it), then waits.
"""

from __future__ import annotations

import resource
import socket
import sys
import time


def main(host: str, port: int, count: int, per_second: float) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = []
    started = time.monotonic()
    for i in range(count):
        ahead_s = started + i / per_second - time.monotonic()
        if ahead_s > 0:
            time.sleep(ahead_s)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(5.0)
        try:
            sock.connect((host, port))
        except OSError:
            sock.close()
            continue
        held.append(sock)
    print(f"opened {len(held)}", flush=True)
    sys.stdin.read()
    for sock in held:
        sock.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
