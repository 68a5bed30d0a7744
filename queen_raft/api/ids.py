"""Ids minted by the proposing node: they travel in the command, so every replica stores the same one."""

from __future__ import annotations

import os

from queen_raft.clock import wall_ms

_MS_MASK = (1 << 48) - 1
# The 74 random bits of a UUIDv7 are drawn from 10 random bytes (80 bits, 6 dropped).
RANDOM_BYTES_PER_ID = 10
_RAND_A_SHIFT = 68  # the top 12 of the 80 bits
_RAND_B_MASK = (1 << 62) - 1  # the low 62 bits
_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0b10 << 62


def _uuid7_text(ms: int, rand: int) -> str:
    """The canonical 8-4-4-4-12 text, formatted from the integer directly: str(uuid.UUID(int=...))
    validates and builds an object per id (with os.urandom, 12% of a 256-op schedule's loop time
    in the profile)."""
    value = (ms << 80) | _VERSION_7 | ((rand >> _RAND_A_SHIFT) << 64) | _VARIANT_RFC | (rand & _RAND_B_MASK)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid7(now_ms: int | None = None) -> str:
    """A UUIDv7 (RFC 9562): 48-bit ms timestamp, then random bits, so ids sort roughly by creation."""
    ms = (wall_ms() if now_ms is None else now_ms) & _MS_MASK
    return _uuid7_text(ms, int.from_bytes(os.urandom(RANDOM_BYTES_PER_ID), "big"))


# The text of a UUIDv7's variant nibble (0b10, then the top 2 of rand_b's 62 bits), by the hex
# digit whose low 2 bits those are.
_VARIANT_NIBBLE = {digit: "89ab"[int(digit, 16) & 0b11] for digit in "0123456789abcdef"}
_VARIANT_NIBBLE_BYTES = bytes.maketrans(b"0123456789abcdef", b"89ab" * 4)
_HEX_PER_ID = 2 * RANDOM_BYTES_PER_ID
# The strided cut below costs about 20 slice copies per batch whatever its size; it is cheaper
# than the per-id formatting from 16 ids on (0.41 vs 0.44 us an id; 0.11 vs 0.39 at 256).
STRIDED_FROM_IDS = 16
_ID_TEXT_STRIDE = 37  # the 36 characters of an id and a comma between ids
# (position in an id's text, position in its 20 hex digits of the pool): rand_a's 3 digits
# after "xxxxxxxx-xxxx-7", the 3 after the variant nibble, the last group's 12.
_POOL_DIGIT_AT = ([(15 + k, k) for k in range(3)] + [(20 + k, 5 + k) for k in range(3)]
                  + [(24 + k, 8 + k) for k in range(12)])
_VARIANT_AT, _VARIANT_FROM = 19, 4


def uuid7_batch(count: int, now_ms: int | None = None) -> list[str]:
    """`count` UUIDv7s of one instant from one read of the clock and of os.urandom (one syscall
    for a whole batch instead of one per id). Distinct with the same odds as `uuid7`'s.

    Cut from the hex of the random pool rather than built as integers: the same text
    `_uuid7_text` makes of the same bytes. Of each id's 20 hex digits the first 3 are rand_a,
    the 5th's low 2 bits and the last 15 digits are rand_b; the 4th and the 5th's high 2 bits
    are dropped. From STRIDED_FROM_IDS ids on, each digit position is copied for all the ids at
    once (a strided slice assignment into the text of the batch, split at the commas) instead of
    formatting each id."""
    ms = (wall_ms() if now_ms is None else now_ms) & _MS_MASK
    ms_hex = f"{ms:012x}"
    pool = os.urandom(RANDOM_BYTES_PER_ID * count).hex()
    if count < STRIDED_FROM_IDS:
        head = f"{ms_hex[:8]}-{ms_hex[8:]}-7"
        return [f"{head}{pool[i:i + 3]}-{_VARIANT_NIBBLE[pool[i + 4]]}{pool[i + 5:i + 8]}-{pool[i + 8:i + _HEX_PER_ID]}"
                for i in range(0, _HEX_PER_ID * count, _HEX_PER_ID)]
    digits = pool.encode("ascii")
    text = bytearray(f"{ms_hex[:8]}-{ms_hex[8:]}-7000-8000-000000000000,".encode("ascii") * count)
    for text_at, digit_at in _POOL_DIGIT_AT:
        text[text_at::_ID_TEXT_STRIDE] = digits[digit_at::_HEX_PER_ID]
    text[_VARIANT_AT::_ID_TEXT_STRIDE] = digits[_VARIANT_FROM::_HEX_PER_ID].translate(_VARIANT_NIBBLE_BYTES)
    return text[:-1].decode("ascii").split(",")


def new_message_id() -> str:
    return uuid7()


def new_message_ids(count: int) -> list[str]:
    return uuid7_batch(count)


def new_lease_id() -> str:
    return uuid7()
