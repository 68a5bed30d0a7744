"""A tenant's snapshot bytes: written as a stream (format 4), read in every format (1 to 4).

The bytes are one zstd frame (level SNAPSHOT_ZSTD_LEVEL, single-threaded, no content size in its
header) of one msgpack array:

    [version, clock, paused, billed, fired counts, timers, broker, kv, fired memory]

In format 4 `timers` is the timer table's own msgpack value, inline (timer_wire.py); in format 3 it
was that value's bytes, a bin nested in the array.

Writing streams: the array is packed piece by piece (headers, then the pending timers a few
thousand at a time) into a zstd stream, whose output leaves in chunks of SNAPSHOT_CHUNK_BYTES. No
copy of the whole encoded state, packed or compressed, is ever held: a snapshot of ten million
timers (gigabytes of msgpack) costs its writer a few MiB beyond the state it reads. The pieces and
the chunks are cut at fixed counts and sizes, so the bytes depend only on the state: two replicas
holding the same timers write the same bytes, however their indexes grew.

Reading streams too: the frame is decompressed into msgpack's unpacker a MiB at a time, so only
the objects restored and that window are in memory, not the decompressed bytes. Formats 1 to 3 are
one-shot frames (with a content size); they stream the same way.
"""

from __future__ import annotations

from typing import IO, Iterable, Iterator

import msgpack
import zstandard

from . import timer_wire
from .limits import READABLE_SNAPSHOT_FORMATS, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_ZSTD_LEVEL

SNAPSHOT_CHUNK_BYTES = 1 << 18
# What the reader asks of the decompressor at a time.
READ_BYTES = 1 << 20
WIRE_FIELDS = 9


def msgpack_pieces(state, fire_results: tuple[str, ...]) -> Iterator[bytes]:
    """The format-4 msgpack of a TenantState, in pieces whose concatenation is the whole value."""
    packer = msgpack.Packer(use_bin_type=True)
    pack = packer.pack
    yield b"".join((packer.pack_array_header(WIRE_FIELDS), pack(SNAPSHOT_FORMAT_VERSION),
                    pack(state.clock), pack(state.scheduling_paused), pack(state.billed),
                    pack([state.fired[name] for name in fire_results])))
    yield from timer_wire.table_pieces(state.timers)
    yield pack(state.broker.to_wire())
    yield pack(state.kv.to_wire())
    yield pack(state.fired_memory.to_wire())


class _ChunkSink:
    """The compressor's output, handed on in chunks of SNAPSHOT_CHUNK_BYTES (the last shorter)."""

    def __init__(self) -> None:
        self.pending = bytearray()

    def write(self, data) -> int:
        self.pending += data
        return len(data)

    def full_chunks(self) -> Iterator[bytes]:
        pending = self.pending
        while len(pending) >= SNAPSHOT_CHUNK_BYTES:
            with memoryview(pending) as view:
                chunk = bytes(view[:SNAPSHOT_CHUNK_BYTES])
            del pending[:SNAPSHOT_CHUNK_BYTES]
            yield chunk


def compressed_chunks(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """The zstd frame of the pieces' concatenation, in chunks of SNAPSHOT_CHUNK_BYTES."""
    sink = _ChunkSink()
    writer = zstandard.ZstdCompressor(level=SNAPSHOT_ZSTD_LEVEL).stream_writer(
        sink, closefd=False, write_return_read=True)
    for piece in pieces:
        writer.write(piece)
        yield from sink.full_chunks()
    writer.close()  # ends the frame
    yield from sink.full_chunks()
    if sink.pending:
        yield bytes(sink.pending)


class _ChunksReader:
    """A read() over a sequence of bytes chunks (a snapshot as the raft file holds it)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._current = memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        while not self._current:
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            self._current = memoryview(chunk)
        if size < 0 or size >= len(self._current):
            data, self._current = bytes(self._current), memoryview(b"")
            return data
        data, self._current = bytes(self._current[:size]), self._current[size:]
        return data


def unpack_wire(data) -> list:
    """The msgpack array of a snapshot given as bytes or as a list of chunks; ValueError when its
    format is not one this code reads."""
    source: IO[bytes] | bytes = data if isinstance(data, (bytes, bytearray, memoryview)) else _ChunksReader(data)
    reader = zstandard.ZstdDecompressor().stream_reader(source, read_size=READ_BYTES)
    # max_buffer_size 0: no bound of msgpack's own (a format-3 timer blob is one bin of ~190 B per
    # timer); what is read is this node's own verified snapshot.
    unpacker = msgpack.Unpacker(reader, raw=False, use_list=True, strict_map_key=False,
                                read_size=READ_BYTES, max_buffer_size=0)
    try:
        wire = unpacker.unpack()
    except msgpack.OutOfData:
        raise ValueError("the snapshot ends before its value does") from None
    if not isinstance(wire, list) or not wire or wire[0] not in READABLE_SNAPSHOT_FORMATS:
        version = wire[0] if isinstance(wire, list) and wire else None
        raise ValueError(f"snapshot format {version} is not one of {READABLE_SNAPSHOT_FORMATS}")
    return wire
