"""Java KeyStore files (``keytool -storetype JKS``, Kafka's default ``ssl.keystore.type``/``ssl.truststore.type``).

Reads bytes the caller passes in (no I/O here). The format (big-endian, as Java's ``DataOutputStream``)::

    u4 magic 0xFEEDFEED | u4 version (1 or 2) | u4 entry count | entries | 20-byte integrity digest
    entry: u4 tag (1 private key, 2 trusted certificate) | alias (Java UTF) | u8 creation time (ms)
      tag 1: u4 length + the protected key | u4 chain length | certificates
      tag 2: a certificate
    certificate: (version 2 only: its type as Java UTF, "X.509" here) | u4 length + DER

The digest is SHA-1 over the store password (UTF-16BE, Java's chars) + ``b"Mighty Aphrodite"`` + every byte
before it; as Java, it is checked only when a password is given. A private key is an EncryptedPrivateKeyInfo
whose algorithm is Sun's KeyProtector (OID 1.3.6.1.4.1.42.2.17.1.1): salt (20 bytes) + key XOR a keystream
(SHA-1(password + previous block), the first block seeded with the salt) + SHA-1(password + plain key), the
plain key being PKCS#8 DER. JCEKS stores (magic 0xCECECECE) are refused.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

JKS_MAGIC, JCEKS_MAGIC = 0xFEEDFEED, 0xCECECECE
KEY_PROTECTOR_OID = "1.3.6.1.4.1.42.2.17.1.1"
_WHITENER = b"Mighty Aphrodite"
_SHA1_LEN = 20


class JksError(ValueError):
    """A malformed, truncated or unsupported store."""


class StorePasswordError(JksError):
    """The integrity digest does not match: a wrong store password or a modified file."""


class KeyPasswordError(JksError):
    """A private key's check digest does not match: a wrong key password (or a modified key)."""


def is_keystore(data: bytes) -> bool:
    """Whether ``data`` starts with the magic of a JKS (or a JCEKS) store."""
    return len(data) >= 4 and struct.unpack(">I", data[:4])[0] in (JKS_MAGIC, JCEKS_MAGIC)


@dataclass(frozen=True)
class TrustedCertEntry:
    alias: str
    timestamp_ms: int
    cert_der: bytes


@dataclass(frozen=True)
class PrivateKeyEntry:
    alias: str
    timestamp_ms: int
    encrypted: bytes  # the EncryptedPrivateKeyInfo (DER) as stored
    chain: tuple[bytes, ...]  # DER certificates, the key's own first

    def decrypt(self, key_password: str) -> bytes:
        """The key as PKCS#8 DER; :class:`KeyPasswordError` when ``key_password`` is not the key's."""
        algorithm, blob = _encrypted_private_key_info(self.encrypted, self.alias)
        if algorithm != KEY_PROTECTOR_OID:
            raise JksError(f"key {self.alias!r}: protected with {algorithm}, not Sun's KeyProtector")
        if len(blob) < 2 * _SHA1_LEN:
            raise JksError(f"key {self.alias!r}: protected key too short")
        password = _password_bytes(key_password)
        salt, body, check = blob[:_SHA1_LEN], blob[_SHA1_LEN:-_SHA1_LEN], blob[-_SHA1_LEN:]
        stream, block = bytearray(), salt
        while len(stream) < len(body):
            block = hashlib.sha1(password + block).digest()
            stream += block
        plain = bytes(a ^ b for a, b in zip(body, stream))
        if not hmac.compare_digest(hashlib.sha1(password + plain).digest(), check):
            raise KeyPasswordError(f"cannot recover the key {self.alias!r}: wrong key password")
        return plain


@dataclass(frozen=True)
class KeyStore:
    version: int
    private_keys: dict[str, PrivateKeyEntry]  # in file order
    trusted_certs: dict[str, TrustedCertEntry]  # in file order
    integrity_checked: bool  # False when read without a password

    def trust_anchors(self) -> list[bytes]:
        """The certificates Java's trust managers take from a store (``TrustStoreUtil.getTrustedCerts``): every
        trusted certificate entry and, of each private key entry, its own certificate (not the rest of its
        chain). DER, file order, duplicates dropped."""
        certs = [e.cert_der for e in self.trusted_certs.values()]
        certs += [e.chain[0] for e in self.private_keys.values() if e.chain]
        return list(dict.fromkeys(certs))


def load(data: bytes, store_password: str | None) -> KeyStore:
    """Parse a JKS store; with a password (even empty) its integrity digest is checked, without one it is not
    (as Java's ``KeyStore.load(stream, null)``)."""
    r = _Reader(data)
    magic = r.u4()
    if magic == JCEKS_MAGIC:
        raise JksError("JCEKS is not supported; convert with keytool -importkeystore to PKCS12")
    if magic != JKS_MAGIC:
        raise JksError("not a JKS key store (no 0xFEEDFEED magic)")
    version = r.u4()
    if version not in (1, 2):
        raise JksError(f"unsupported JKS version {version}")
    keys: dict[str, PrivateKeyEntry] = {}
    trusted: dict[str, TrustedCertEntry] = {}
    for _ in range(r.u4()):
        tag, alias, timestamp = r.u4(), r.utf(), r.u8()
        if alias in keys or alias in trusted:
            raise JksError(f"alias {alias!r} appears twice")
        if tag == 1:
            encrypted = r.take(r.u4())
            chain = tuple(r.cert(version, alias) for _ in range(r.u4()))
            keys[alias] = PrivateKeyEntry(alias, timestamp, encrypted, chain)
        elif tag == 2:
            trusted[alias] = TrustedCertEntry(alias, timestamp, r.cert(version, alias))
        else:
            raise JksError(f"entry {alias!r}: unknown entry tag {tag} (secret keys need JCEKS or PKCS12)")
    if store_password is not None:
        end = r.pos
        digest = r.take(_SHA1_LEN)
        expected = hashlib.sha1(_password_bytes(store_password) + _WHITENER + data[:end]).digest()
        if not hmac.compare_digest(digest, expected):
            raise StorePasswordError("the key store's integrity check failed: wrong store password or a "
                                     "corrupted file")
    return KeyStore(version, keys, trusted, store_password is not None)


def _password_bytes(password: str) -> bytes:
    return password.encode("utf-16-be", "surrogatepass")  # two bytes per Java char, high byte first


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = memoryview(data), 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise JksError(f"truncated key store: {n} bytes wanted at offset {self.pos} of {len(self.data)}")
        self.pos += n
        return bytes(self.data[self.pos - n:self.pos])

    def u4(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def u8(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def utf(self) -> str:
        """Java's modified UTF-8 (``DataInput.readUTF``): NUL as C0 80, characters beyond the BMP as two
        3-byte surrogates."""
        raw = self.take(struct.unpack(">H", self.take(2))[0]).replace(b"\xc0\x80", b"\x00")
        try:
            return raw.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeError:
            raise JksError(f"malformed alias or type name at offset {self.pos}") from None

    def cert(self, version: int, alias: str) -> bytes:
        if version == 2:
            kind = self.utf()
            if kind != "X.509":
                raise JksError(f"entry {alias!r}: certificate type {kind!r}, not X.509")
        return self.take(self.u4())


def _encrypted_private_key_info(der: bytes, alias: str) -> tuple[str, bytes]:
    """(algorithm OID, encrypted bytes) of ``SEQUENCE { SEQUENCE { OID, params }, OCTET STRING }``."""
    try:
        body, rest = _tlv(der, 0x30)
        algorithm, body = _tlv(body, 0x30)
        blob, tail = _tlv(body, 0x04)
        oid, _params = _tlv(algorithm, 0x06)
        if rest or tail:
            raise ValueError("trailing bytes")
        return _oid(oid), blob
    except ValueError as exc:
        raise JksError(f"key {alias!r}: malformed EncryptedPrivateKeyInfo ({exc})") from None


def _tlv(data: bytes, tag: int) -> tuple[bytes, bytes]:
    """The value of one DER element of ``tag`` at the start of ``data``, and what follows it."""
    if len(data) < 2 or data[0] != tag:
        raise ValueError(f"expected tag {tag:#04x}")
    length, pos = data[1], 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4 or len(data) < 2 + count:
            raise ValueError("bad length")
        length, pos = int.from_bytes(data[2:2 + count], "big"), 2 + count
    if pos + length > len(data):
        raise ValueError("truncated")
    return data[pos:pos + length], data[pos + length:]


def _oid(raw: bytes) -> str:
    arcs, value = [], 0
    for byte in raw:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise ValueError("empty OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in [first, arcs[0] - 40 * first, *arcs[1:]])
