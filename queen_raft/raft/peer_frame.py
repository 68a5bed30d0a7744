"""The AEAD peer frame: what a connection sends once both ends are known to read it.

pysyncobj's frame with a password is pickle, zlib and Fernet (AES-128-CBC, HMAC-SHA256, base64:
4/3 of the size on the wire), and both ends of every hop pay for all of it. The AEAD frame is
AES-256-GCM over the pickle alone, raw bytes:

    length (4 bytes, pysyncobj's header) | AEAD_FRAME_KIND (1 byte) | ciphertext | tag (16 bytes)

- **Tell the kinds apart by the first byte.** A Fernet token is URL-safe base64 and starts with
  `g` (its version byte 0x80); AEAD_FRAME_KIND is outside the base64 alphabet, so no token starts
  with it. A receiver without this module treats the frame as a Fernet token, which fails its
  HMAC: the connection drops, nothing is unpickled. That is why a node sends AEAD frames only on a
  connection whose peer offered them (below).
- **Authentication before anything reads the plaintext.** GCM checks the tag over the whole frame
  before it returns a byte; only then is it unpickled (there is no zlib step: the payloads are
  zstd or small, and stored zlib only copied them).
- **One key per direction of each connection.** A process-wide master key is stretched from the
  Raft password with PBKDF2 (as many rounds as pysyncobj's Fernet key, but another salt, so the
  two keys are unrelated and a captured frame costs a password guesser as much as a Fernet one
  does), and each direction's key is HKDF of it over both random keys of the connection's
  handshake: the receiver's, then the sender's. The handshake (Fernet frames) exchanges a fresh
  32-byte random key from each end per connection, so keys never repeat across connections, even
  when one end replays an old handshake.
- **The nonce is the frame's position**: 96 bits, big-endian, the count of frames this direction
  sent before it. Under a fresh key per direction a counter never repeats, where random nonces
  under one password-wide key would pass GCM's bound (2^32 frames per key) within days at a busy
  group's frame rate. The receiver decrypts with the count it expects, so a frame replayed,
  reordered, dropped or taken from another connection fails authentication. This is stronger
  than the Fernet frame's rule it replaces: there the sender's monotonic timestamp (whole
  seconds) was only required not to go back within a connection, and frames of one second could
  be replayed.

Negotiation: a node that reads AEAD frames appends AEAD_OFFER to the random key it sends in the
handshake. Older nodes treat the key as opaque bytes (they wrap every message with it and compare
it), so the offer costs them nothing. A connection sends AEAD frames once the peer's key carried
the offer, and every frame after the peer's key must then be an AEAD frame; random keys themselves
always travel in Fernet frames (the peer needs them to derive the AEAD keys).
"""

from __future__ import annotations

import functools
import pickle

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

AEAD_FRAME_KIND = 0x01
AEAD_FRAME_KIND_BYTE = bytes([AEAD_FRAME_KIND])
# Appended to a node's 32 random handshake bytes: "this end reads AEAD frames, version 1".
AEAD_OFFER = b"+queen-aead-1"
RANDOM_KEY_BYTES = 32
TAG_BYTES = 16
NONCE_BYTES = 12
# The stretching of the password, as pysyncobj's Fernet key (encryptor.py), with a salt of our own.
MASTER_KEY_SALT = b"queen-raft peer frame master key v1"
MASTER_KEY_ITERATIONS = 100_000
DIRECTION_KEY_INFO = b"queen-raft peer frame direction key v1|"
PICKLE_PROTOCOL = 4


class FrameRejected(ValueError):
    """An AEAD frame that did not authenticate (another password, connection, direction or
    position), or arrived where none may."""


@functools.lru_cache(maxsize=8)
def master_key(password: str | bytes) -> bytes:
    """The process-wide key every direction key is derived from (once per password: PBKDF2 is
    meant to be slow)."""
    if isinstance(password, str):
        password = password.encode()
    kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=MASTER_KEY_SALT, iterations=MASTER_KEY_ITERATIONS)
    return kdf.derive(password)


def offers_aead(random_key) -> bool:
    """Whether a peer's handshake key says it reads AEAD frames."""
    return isinstance(random_key, bytes) and len(random_key) > RANDOM_KEY_BYTES and random_key.endswith(AEAD_OFFER)


def direction_cipher(master: bytes, receiver_key: bytes, sender_key: bytes) -> AESGCM:
    """The AES-256-GCM of one direction: the receiver's handshake key first, then the sender's."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=DIRECTION_KEY_INFO + len(receiver_key).to_bytes(2, "big") + receiver_key + sender_key)
    return AESGCM(hkdf.derive(master))


def nonce(position: int) -> bytes:
    return position.to_bytes(NONCE_BYTES, "big")


def seal(cipher: AESGCM, position: int, message) -> bytes:
    """The frame body (without pysyncobj's length header) of `message` at `position`."""
    return AEAD_FRAME_KIND_BYTE + cipher.encrypt(nonce(position), pickle.dumps(message, PICKLE_PROTOCOL),
                                                 AEAD_FRAME_KIND_BYTE)


def open_frame(cipher: AESGCM, position: int, body) -> object:
    """The message of a frame body that starts with AEAD_FRAME_KIND; FrameRejected unless it
    authenticates at `position` (checked before anything is unpickled)."""
    try:
        plaintext = cipher.decrypt(nonce(position), body[1:], AEAD_FRAME_KIND_BYTE)
    except InvalidTag:
        raise FrameRejected("an AEAD frame that does not authenticate here") from None
    return pickle.loads(plaintext)
