"""A pending timer stored as one bytes object: its due-index entry and its record at once.

An entry is `dueAt | queue | timerKey | fields`:

- dueAt: 8 bytes big-endian of dueAt + 2^63, so negative instants sort before positive ones;
- queue and timerKey: UTF-8 (surrogatepass, so any str the state holds encodes), each NUL byte
  escaped as NUL 0xFF and each name ended by a NUL (the escape of FoundationDB's tuple layer);
- fields: one msgpack array of the other fields (FIELD_ORDER), whose first byte, a fixarray
  header, is below 0xFF.

Bytes compare as (dueAt, queue, timerKey) compare, str order being the order of UTF-8 bytes:
an ended name sorts before every longer name it begins (the NUL, below any byte of UTF-8, meets
that name's next byte, and an escaped NUL's 0xFF exceeds any fields header). No two pending
timers share (dueAt, queue, timerKey), so the fields never decide an order: the entry is its
own element of the due index, and the timer's key map holds the same object. One object per
timer instead of a tuple of thirteen slots and its boxed ints and strings is what keeps ten
million pending timers within a node's memory (docs/performance.md).

Fields equal to a common value are stored as nil: the partition when it is the default, the txn
when it equals the timerKey (as many clients send), updatedAt when equal to createdAt; createdAt
is stored as dueAt - createdAt, a smaller int.

The tables work on entries; everything outside them sees the 13-field Timer tuple of timers.py,
made from an entry when read (`timer_of`).
"""

from __future__ import annotations

import sys

import msgpack

from .limits import DEFAULT_PARTITION

_intern = sys.intern
_DUE_BIAS = 1 << 63
_NUL = b"\x00"
_ESCAPED_NUL = b"\x00\xff"
_ESCAPE = 0xFF
FIELD_ORDER = ("partition", "txn", "message_id", "payload", "payload_zstd", "encrypted",
               "producer_sub", "retry", "due_at - created_at", "updated_at")

_pack = msgpack.Packer(use_bin_type=True).pack
_unpackb = msgpack.unpackb


def name_bytes(name: str) -> bytes:
    """A queue name or timerKey as it sits in an entry, its ending NUL included."""
    encoded = name.encode("utf-8", "surrogatepass")
    if 0 in encoded:
        encoded = encoded.replace(_NUL, _ESCAPED_NUL)
    return encoded + _NUL


def due_bytes(due_at: int) -> bytes:
    return (due_at + _DUE_BIAS).to_bytes(8, "big")


def due_of(entry: bytes) -> int:
    return int.from_bytes(entry[:8], "big") - _DUE_BIAS


def make_entry(prefix: bytes, key: str, partition: str, txn: str, message_id: str, payload: bytes,
               payload_zstd: bool, encrypted: bool, producer_sub: str | None, retry,
               created_at: int, updated_at: int, due_at: int) -> bytes:
    """An entry from its `prefix` (due_bytes(due_at) + the queue's name_bytes) and the other fields."""
    encoded = key.encode("utf-8", "surrogatepass")
    if 0 in encoded:
        encoded = encoded.replace(_NUL, _ESCAPED_NUL)
    return b"".join((prefix, encoded, _NUL, _pack(
        (None if partition == DEFAULT_PARTITION else partition, None if txn == key else txn,
         message_id, payload, payload_zstd, encrypted, producer_sub, retry, due_at - created_at,
         None if updated_at == created_at else updated_at))))


def entry_of(timer: tuple) -> bytes:
    """The entry of a 13-field Timer tuple (timers.TIMER_FIELDS)."""
    (due_at, queue, key, partition, txn, message_id, payload, payload_zstd, encrypted,
     producer_sub, retry, created_at, updated_at) = timer
    return make_entry(due_bytes(due_at) + name_bytes(queue), key, partition, txn, message_id,
                      payload, payload_zstd, encrypted, producer_sub, retry, created_at,
                      updated_at, due_at)


def _name_end(entry: bytes, start: int) -> int:
    """The position of the NUL that ends the name starting at `start`."""
    end = entry.index(0, start)
    while entry[end + 1] == _ESCAPE:
        end = entry.index(0, end + 2)
    return end


def _name(raw: bytes) -> str:
    if 0 in raw:
        raw = raw.replace(_ESCAPED_NUL, _NUL)
    return raw.decode("utf-8", "surrogatepass")


def queue_and_key(entry: bytes) -> tuple[str, str]:
    """The entry's queue (interned) and timerKey."""
    queue_end = _name_end(entry, 8)
    key_end = _name_end(entry, queue_end + 1)
    return _intern(_name(entry[8:queue_end])), _name(entry[queue_end + 1:key_end])


def timer_of(entry: bytes, queue: str | None = None, key: str | None = None) -> tuple:
    """The 13-field Timer tuple of an entry; `queue` and `key`, when the caller knows them, spare
    decoding them again (the tuple then holds the caller's objects)."""
    global _last_queue
    queue_end = entry.index(0, 8)
    key_end = entry.index(0, queue_end + 1)
    if entry[queue_end + 1] == _ESCAPE or entry[key_end + 1] == _ESCAPE:  # a name holds a NUL
        queue_end = _name_end(entry, 8)
        key_end = _name_end(entry, queue_end + 1)
        if queue is None:
            queue = _intern(_name(entry[8:queue_end]))
        if key is None:
            key = _name(entry[queue_end + 1:key_end])
    else:  # the first NUL ends each name: neither holds one
        if queue is None:
            queue_bytes = entry[8:queue_end]
            last = _last_queue  # one read: another thread may replace the pair meanwhile
            if queue_bytes == last[0]:  # a fire takes a run of one queue's timers
                queue = last[1]
            else:
                queue = _intern(queue_bytes.decode("utf-8", "surrogatepass"))
                _last_queue = (queue_bytes, queue)
        if key is None:
            key = entry[queue_end + 1:key_end].decode("utf-8", "surrogatepass")
    (partition, txn, message_id, payload, payload_zstd, encrypted, producer_sub, retry,
     age, updated_at) = _unpackb(entry[key_end + 1:], use_list=False, raw=False)
    due_at = int.from_bytes(entry[:8], "big") - _DUE_BIAS
    created_at = due_at - age
    return (due_at, queue, key, DEFAULT_PARTITION if partition is None else _intern(partition),
            key if txn is None else txn, message_id, payload, payload_zstd, encrypted,
            None if producer_sub is None else _intern(producer_sub), retry, created_at,
            created_at if updated_at is None else updated_at)


def _array_header(count: int) -> bytes:
    """The msgpack header of an array of `count` elements (array 32: any count a list holds)."""
    return b"\xdd" + count.to_bytes(4, "big")


# The last queue name `timer_of` decoded and its interned str, as one pair replaced whole (reads
# may decode on another thread than the apply's): a cache of a pure function's result, so the
# state is the same on every replica whatever it holds.
_last_queue = (b"", "")
