"""What one Raft frame costs on the wire, with the Raft password (Fernet) and without.

    .venv/bin/python bench/raft_wire_bench.py [--sizes 100,65536,1048576] [--rounds 2]

Two FastTcpConnections over a socketpair, driven by one pysyncobj poller in this process: each
message (an append_entries carrying one entry of the given size) is sent, received, decrypted and
unpickled before the next is sent. Prints wall and CPU time per message, both ends together, for
each size, alternating plaintext and encrypted rounds. The handshake is skipped: the receiving end
is marked as having proven the password, as after a real handshake.
"""

from __future__ import annotations

import argparse
import os
import socket
import time

from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller

from queen_raft.raft.connection import FastTcpConnection, install_connection_recipe
from queen_raft.raft.settings import SOCKET_BUFFER_BYTES

# Messages per measurement: enough for a stable mean, at most a few seconds per size.
BYTES_PER_MEASUREMENT = 64 * 1024 * 1024
MIN_MESSAGES, MAX_MESSAGES = 20, 2000
POLL_TIMEOUT_S = 0.01


def measure(size: int, encrypted: bool) -> tuple[float, float]:
    """(wall ms, CPU ms) per message."""
    poller = createPoller("auto")
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    received: list = []
    options = dict(sendBufferSize=SOCKET_BUFFER_BYTES, recvBufferSize=SOCKET_BUFFER_BYTES, timeout=3600)
    sender = FastTcpConnection(poller, socket=left, **options)
    receiver = FastTcpConnection(poller, socket=right, onMessageReceived=received.append, **options)
    if encrypted:
        sender.encryptor = receiver.encryptor = getEncryptor("bench password")
        receiver.peer_proven = True
    message = {"type": "append_entries", "entries": [(os.urandom(size), 1, 1)]}
    count = max(MIN_MESSAGES, min(MAX_MESSAGES, BYTES_PER_MEASUREMENT // max(size, 1)))
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(count):
        sender.send(message)
        while len(received) <= i:
            poller.poll(POLL_TIMEOUT_S)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    sender.disconnect()
    receiver.disconnect()
    return wall / count * 1000, cpu / count * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,65536,1048576")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    install_connection_recipe()
    for size in (int(s) for s in args.sizes.split(",")):
        for _ in range(args.rounds):
            for encrypted in (False, True):
                wall_ms, cpu_ms = measure(size, encrypted)
                print(f"{size:>9} B  password={'on ' if encrypted else 'off'}  {wall_ms:.3f} ms wall, "
                      f"{cpu_ms:.3f} ms CPU per message", flush=True)


if __name__ == "__main__":
    main()
