"""AES-256-GCM at rest for queues with `encryptionEnabled` (docs/spec.md section 2, Encryption).

The proposing node encrypts (the nonce is random, so it must be minted outside the state machine
and travel as ciphertext in the entry); the answering node decrypts for consumers. Stored form:
12-byte nonce, then ciphertext with its 16-byte tag.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from queen_raft.api.errors import NO_ENCRYPTION_KEY, ApiError, retry_after_header

# 96-bit nonces are GCM's native size; random ones are safe far beyond any queue's message count.
NONCE_BYTES = 12


# A node without the key cannot write to an encrypting queue; another node (with it) can, so the
# answer is a 503 that sends the client to try again, elsewhere, soon.
ENCRYPTION_UNAVAILABLE_RETRY_AFTER_S = 1


def encryption_unavailable(queues: set[str]) -> ApiError:
    """A queue began to encrypt after this node started without QUEEN_ENCRYPTION_KEY (at start the
    node refuses to run in that case: see node.py)."""
    return ApiError(503, "encryption_unavailable",
                    f"queue(s) {', '.join(sorted(queues))} encrypt at rest but this node has no QUEEN_ENCRYPTION_KEY",
                    retry_after_header(ENCRYPTION_UNAVAILABLE_RETRY_AFTER_S), fields={"reason": NO_ENCRYPTION_KEY})


class PayloadDecryptError(ValueError):
    pass


class PayloadCipher:
    def __init__(self, key_hex: str):
        self._aead = AESGCM(bytes.fromhex(key_hex))

    def encrypt(self, plaintext: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext, None)

    def decrypt(self, stored: bytes) -> bytes:
        if len(stored) < NONCE_BYTES:
            raise PayloadDecryptError("stored payload is shorter than a nonce")
        try:
            return self._aead.decrypt(stored[:NONCE_BYTES], stored[NONCE_BYTES:], None)
        except InvalidTag:
            raise PayloadDecryptError("the payload does not decrypt with QUEEN_ENCRYPTION_KEY (rotated key?)") from None
