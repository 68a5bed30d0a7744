"""The frame caps of a Raft connection leave room for every frame a node itself sends."""

from __future__ import annotations

import os
import pickle
import time
import zlib

import pytest
from pysyncobj.encryptor import getEncryptor

from queen_raft.raft.connection import WIRE_PICKLE_PROTOCOL, WIRE_ZLIB_LEVEL
from queen_raft.raft.settings import (
    APPEND_ENTRIES_BATCH_SIZE_BYTES,
    MAX_ENTRY_BYTES,
    MAX_HANDSHAKE_FRAME_BYTES,
    MAX_PEER_FRAME_BYTES,
)

# The smallest command entries of ours (a barrier, a small KV op) are a few dozen bytes.
SMALL_ENTRY_BYTES = 40


def encrypted_frame_length(fernet, message) -> int:
    """What FastTcpConnection.send puts on the wire for message, less the 4-byte header."""
    data = zlib.compress(pickle.dumps(message, protocol=WIRE_PICKLE_PROTOCOL), WIRE_ZLIB_LEVEL)
    return len(fernet.encrypt_at_time(data, int(time.monotonic())))


@pytest.fixture(scope="module")
def fernet():
    return getEncryptor("test password")


def test_the_largest_append_entries_frame_fits_the_peer_cap(fernet):
    # pysyncobj takes entries until their bytes reach the batch size, then one more: the worst case
    # is a batch of small entries just under the batch size, then the largest entry we accept.
    count = (APPEND_ENTRIES_BATCH_SIZE_BYTES - 1) // SMALL_ENTRY_BYTES
    # Distinct objects: pickle would write a repeated one as a back-reference.
    entries = [(i.to_bytes(8, "big") + b"s" * (SMALL_ENTRY_BYTES - 8), 10**9 + i, 7) for i in range(count)]
    entries.append((os.urandom(MAX_ENTRY_BYTES), 10**9 + count, 7))
    message = {"type": "append_entries", "term": 7, "commit_index": 10**9, "entries": entries,
               "prevLogIdx": 10**9 - 1, "prevLogTerm": 7}
    length = encrypted_frame_length(fernet, (os.urandom(32), message))
    assert length <= MAX_PEER_FRAME_BYTES, f"{length} > {MAX_PEER_FRAME_BYTES}"


def test_the_handshake_frames_fit_the_handshake_cap(fernet):
    random_key = os.urandom(32)
    assert encrypted_frame_length(fernet, random_key) <= MAX_HANDSHAKE_FRAME_BYTES
    assert encrypted_frame_length(fernet, (random_key, os.urandom(32))) <= MAX_HANDSHAKE_FRAME_BYTES
    address = "a-long-host-name.example.internal:65535"
    assert encrypted_frame_length(fernet, (random_key, address)) <= MAX_HANDSHAKE_FRAME_BYTES


def test_the_timestamp_read_from_a_checked_token_is_fernets(fernet):
    from queen_raft.raft.connection import fernet_timestamp

    for timestamp in (0, 1, 86_400, 2**40 + 12345):
        token = fernet.encrypt_at_time(os.urandom(100), timestamp)
        assert fernet_timestamp(token) == fernet.extract_timestamp(token) == timestamp
