"""Key material for the DEK registry's shared KEKs (``deks.py``): the registry wraps and unwraps data keys itself only
for a KEK marked ``shared``, and only through a KMS it can reach. Here that is Confluent's ``local-kms``: an
AES-128-GCM key derived from a secret (the KEK's ``kmsProps.secret``, else the ``LOCAL_SECRET`` environment
variable) by HKDF-SHA256 with no salt and no info, used as Tink's RAW AEAD (12-byte nonce, ciphertext, 16-byte tag).
Confluent's clients (Java, Go, Python) derive the same key, so a DEK wrapped here unwraps there and back.

A data key is Tink's serialized key proto, as the clients' Cryptor generates it: ``AesGcmKey`` (field 3, the key
bytes) for AES128_GCM / AES256_GCM, ``AesSivKey`` (field 2, 64 bytes) for AES256_SIV.

Cloud KMSes (aws-kms, azure-kms, gcp-kms, hcvault) are not reached from here: a shared KEK of theirs fails DEK
generation (50070), as Confluent's registry does when it cannot reach the KMS. Unshared KEKs, the common case, need
no KMS on the registry at all: the client wraps the key and the registry only keeps it.
"""

from __future__ import annotations

import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

LOCAL_KMS = "local-kms"
ALGORITHMS = {"AES128_GCM": (16, 3), "AES256_GCM": (32, 3), "AES256_SIV": (64, 2)}  # key bytes, proto field
NONCE = 12


class KmsError(Exception):
    """A KEK's KMS cannot wrap or unwrap (unknown type, no secret, a ciphertext that does not open)."""


class LocalKms:
    def __init__(self, secret: str):
        key = HKDF(algorithm=hashes.SHA256(), length=16, salt=None, info=b"").derive(secret.encode())
        self._aead = AESGCM(key)

    def encrypt(self, plaintext: bytes) -> bytes:
        nonce = os.urandom(NONCE)
        return nonce + self._aead.encrypt(nonce, plaintext, b"")

    def decrypt(self, ciphertext: bytes) -> bytes:
        if len(ciphertext) < NONCE + 16:
            raise KmsError("ciphertext too short")
        try:
            return self._aead.decrypt(ciphertext[:NONCE], ciphertext[NONCE:], b"")
        except Exception as exc:  # noqa: BLE001 (cryptography's InvalidTag: a wrong secret or damaged bytes)
            raise KmsError(f"decryption failed ({type(exc).__name__})") from None


def kms_for(kms_type: str, kms_props: dict[str, str]) -> LocalKms:
    """The AEAD of a KEK, as Confluent's ``Kek.toAead`` makes it from the KEK's type and properties."""
    if kms_type != LOCAL_KMS:
        raise KmsError(f"the registry reaches no KMS of type {kms_type} (only {LOCAL_KMS})")
    secret = kms_props.get("secret") or os.environ.get("LOCAL_SECRET")
    if not secret:
        raise KmsError("cannot load secret")
    return LocalKms(secret)


def new_data_key(algorithm: str) -> bytes:
    """A fresh data key of ``algorithm`` in the form Confluent's clients use it: Tink's serialized key proto."""
    size, field = ALGORITHMS[algorithm]
    return bytes([field << 3 | 2, size]) + os.urandom(size)
