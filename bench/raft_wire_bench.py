"""What one Raft frame costs on the wire: without a password, with it as Fernet frames (a peer of an
older version), and as AEAD frames (queen_raft/raft/peer_frame.py).

    .venv/bin/python bench/raft_wire_bench.py [--sizes 100,65536,1048576] [--rounds 2]

Two FastTcpConnections over a socketpair, driven by one pysyncobj poller in this process: each
message (an append_entries carrying one entry of the given size) is sent, received, decrypted and
unpickled before the next is sent. Prints wall and CPU time per message, both ends together, for
each size, alternating the three frames. The handshake is skipped: the receiving end is marked as
having proven the password, and for AEAD both ends hold the random keys a handshake would leave.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

# The tree's own code, not the venv's editable install (which may be another checkout's): an
# A/B of two exported trees must measure two trees. Node processes run this file and get it too.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller

from queen_raft.raft import peer_frame
from queen_raft.raft.connection import FastTcpConnection, install_connection_recipe
from queen_raft.raft.settings import SOCKET_BUFFER_BYTES

# Messages per measurement: enough for a stable mean, at most a few seconds per size.
BYTES_PER_MEASUREMENT = 64 * 1024 * 1024
MIN_MESSAGES, MAX_MESSAGES = 20, 2000
POLL_TIMEOUT_S = 0.01


PASSWORD = "bench password"
FRAMES = ("off", "fernet", "aead")


def as_after_a_handshake(sender: FastTcpConnection, receiver: FastTcpConnection) -> None:
    """Both ends read AEAD frames and hold each other's random key (connection.py's properties)."""
    for conn in (sender, receiver):
        conn.frame_master = peer_frame.master_key(PASSWORD)
        conn.recvRandKey = os.urandom(peer_frame.RANDOM_KEY_BYTES)
    sender.sendRandKey, receiver.sendRandKey = receiver.recvRandKey, sender.recvRandKey


def measure(size: int, frame: str) -> tuple[float, float]:
    """(wall ms, CPU ms) per message."""
    poller = createPoller("auto")
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    received: list = []
    options = dict(sendBufferSize=SOCKET_BUFFER_BYTES, recvBufferSize=SOCKET_BUFFER_BYTES, timeout=3600)
    sender = FastTcpConnection(poller, socket=left, **options)
    receiver = FastTcpConnection(poller, socket=right, onMessageReceived=received.append, **options)
    if frame != "off":
        sender.encryptor = receiver.encryptor = getEncryptor(PASSWORD)
        receiver.peer_proven = True
    if frame == "aead":
        as_after_a_handshake(sender, receiver)
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
            for frame in FRAMES:
                wall_ms, cpu_ms = measure(size, frame)
                print(f"{size:>9} B  {frame:<6}  {wall_ms:.3f} ms wall, {cpu_ms:.3f} ms CPU per message", flush=True)


if __name__ == "__main__":
    main()
