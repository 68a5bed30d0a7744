"""Sends malformed requests to host:port, one connection each, back to back, until stdin closes;
then prints "sent <n>". Every fifth connection is a client leaving mid-body: an authenticated
(argv[3], a read-write token) POST whose body stops short, then the socket closes.

Run as a child process by the connection-flood test, so that its loop does not compete for the
test process's GIL with the /health probe it measures.
"""

from __future__ import annotations

import socket
import sys
import threading

MALFORMED = [
    b"GET /health HTTP/1.1\r\nHost: n\r\nContent-Length: twelve\r\n\r\n",  # a bad header value
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 64,  # a TLS hello on the HTTP port
    b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n",  # a request line over the limit
    b"POST /api/v1/timers HTTP/1.1\r\nHost: n\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # bad chunk size
]


def leave_mid_body(token: str) -> bytes:
    return (f"POST /api/v1/timers HTTP/1.1\r\nHost: n\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"operations\": [").encode()


def main(host: str, port: int, token: str) -> None:
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    sent = 0
    while not stop.is_set():
        try:
            with socket.create_connection((host, port), timeout=2.0) as sock:
                if sent % 5 == 4:
                    sock.sendall(leave_mid_body(token))
                else:
                    sock.sendall(MALFORMED[sent % 5])
                    sock.recv(4096)
        except OSError:
            pass
        sent += 1
    print(f"sent {sent}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
