"""A request body's bytes: read within a deadline and the HTTP ceiling, then decoded from its
Content-Encoding with the same ceiling applied while decompressing.

The server hands bodies over as they arrived (the app sets `auto_decompress=False`): aiohttp would
otherwise inflate a body while receiving it, before any handler could refuse the request, and
again when it drains an unread body after the answer (a 3 MB gzip body is 3 GB inflated). Here a
route authenticates first, and only then is the body read and inflated, chunk by chunk, stopping
as soon as the output passes the ceiling.

Codings: identity, gzip (and x-gzip), deflate (zlib, or raw deflate as some clients send) and
zstd; any other is 415 `unsupported_encoding`. A body that does not decode is the route's 400.
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web

from queen_raft.api.errors import ApiError
from queen_raft.state.zstd_bounded import decompress_bounded

# Inflate output is produced this much at a time, so a bomb stops one chunk past the ceiling.
INFLATE_CHUNK = 256 * 1024
GZIP_WBITS = 16 + zlib.MAX_WBITS
ZLIB_WBITS = zlib.MAX_WBITS
RAW_DEFLATE_WBITS = -zlib.MAX_WBITS
IDENTITY = ("", "identity")
SUPPORTED_CODINGS = ("gzip", "x-gzip", "deflate", "zstd")


def too_large(limit: int, what: str = "the request body") -> ApiError:
    return ApiError(413, "payload_too_large", f"{what} is over {limit} bytes")


def unsupported_encoding(coding: str) -> ApiError:
    return ApiError(415, "unsupported_encoding",
                    f"Content-Encoding {coding!r} is not supported; send identity, {', '.join(SUPPORTED_CODINGS)}")


async def read_body(request: web.Request, bad_request_code: str, timeout_s: float) -> bytes:
    """The decoded body, at most `request.client_max_size` bytes both as sent and as decoded."""
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    if coding not in IDENTITY and coding not in SUPPORTED_CODINGS:
        raise unsupported_encoding(coding)  # before a byte of the body is read
    limit = request.client_max_size
    try:
        if request.content.is_eof():  # the whole body is buffered: reading it cannot wait
            raw = await request.read()
        else:
            async with asyncio.timeout(timeout_s):
                raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_large(limit) from None
    except TimeoutError:
        raise ApiError(408, "request_timeout", f"the request body did not arrive within {timeout_s:g} s") from None
    if coding in IDENTITY or not raw:
        return raw
    return decode_body(raw, coding, limit, bad_request_code)


def decode_body(raw: bytes, coding: str, limit: int, bad_request_code: str) -> bytes:
    if coding == "zstd":
        decoded = decompress_bounded(raw, limit)
        if decoded == "payload_too_large":
            raise too_large(limit, "the decompressed request body")
        if isinstance(decoded, str):
            raise ApiError(400, bad_request_code, "the body does not decode as zstd")
        return decoded
    if coding == "deflate":
        wbits = ZLIB_WBITS if raw[0] & 0x0F == 8 else RAW_DEFLATE_WBITS  # RFC 1950's CM field
    else:
        wbits = GZIP_WBITS
    try:
        return inflate_bounded(raw, wbits, limit)
    except zlib.error:
        raise ApiError(400, bad_request_code, f"the body does not decode as {coding}") from None


def inflate_bounded(data: bytes, wbits: int, limit: int) -> bytes:
    """Inflates `data` (one stream, nothing after it) into at most `limit` bytes, else a 413 the
    moment the output passes it. A truncated stream is a zlib.error, like a corrupt one."""
    inflater = zlib.decompressobj(wbits)
    parts: list[bytes] = []
    total = 0
    pending = data
    while not inflater.eof:
        chunk = inflater.decompress(pending, INFLATE_CHUNK)
        total += len(chunk)
        if total > limit:
            raise too_large(limit, "the decompressed request body")
        parts.append(chunk)
        if not chunk and not inflater.unconsumed_tail:
            break  # every byte consumed and nothing more comes out: the stream is cut short
        pending = inflater.unconsumed_tail
    if not inflater.eof:
        raise zlib.error("the compressed stream ends early")
    if inflater.unused_data:
        raise zlib.error("bytes follow the compressed stream")
    return b"".join(parts)
