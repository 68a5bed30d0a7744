"""AES-256-GCM at rest for queues with `encryptionEnabled` (SPEC.md section 2, Encryption).

The proposing node encrypts (the nonce is random, so it must be minted outside the state machine
and travel as ciphertext in the entry); the answering node decrypts for consumers. Stored form:
12-byte nonce, then ciphertext with its 16-byte tag.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# 96-bit nonces are GCM's native size; random ones are safe far beyond any queue's message count.
NONCE_BYTES = 12


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
