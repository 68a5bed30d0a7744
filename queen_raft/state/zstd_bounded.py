"""A zstd payload decompressed with its output bounded, and a fixed error text when it cannot be.

Both the fire (a timer's payloadZstd) and the API (a zstd request body) use it; the state's answer
is replicated, so its error texts are fixed words, never the library's message.
"""

from __future__ import annotations

import zstandard

# Decompression reads this much at a time, so a large limit never allocates its whole size up front.
DECOMPRESS_CHUNK = 1 << 20


def decompress_bounded(payload: bytes, limit: int) -> bytes | str:
    """The decompressed payload, or why it cannot be: corrupt, or larger than `limit`.

    Read in chunks, so a large `maxPayloadBytes` never allocates its whole size up front and a
    zstd bomb stops one chunk past the limit. The error text is fixed (not the library's message):
    `lastError` is replicated, and replicas must agree on it even across zstandard versions.
    """
    parts: list[bytes] = []
    total = 0
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(payload)
        while True:
            chunk = reader.read(DECOMPRESS_CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                return "payload_too_large"
            parts.append(chunk)
    except zstandard.ZstdError:
        return "payload_zstd: the payload does not decompress"
    return b"".join(parts)
