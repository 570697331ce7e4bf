"""The registry's local KMS and data keys (schema_registry.kms) against Tink, which Confluent's clients use: a key
the registry wraps opens with confluent-kafka's LocalKmsClient and the other way round, and the data keys it makes
are keys Tink's primitives of each DEK algorithm accept."""

from __future__ import annotations

import pytest

from schema_registry import kms

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def test_keys_wrapped_here_open_with_tink_and_back():
    from confluent_kafka.schema_registry.rules.encryption.localkms.local_client import LocalKmsClient
    from tink import aead

    aead.register()
    tink = LocalKmsClient("s3cret").get_aead("local-kms://k")
    ours = kms.kms_for("local-kms", {"secret": "s3cret"})
    assert tink.decrypt(ours.encrypt(b"data key"), b"") == b"data key"
    assert ours.decrypt(tink.encrypt(b"data key", b"")) == b"data key"
    with pytest.raises(kms.KmsError):
        kms.kms_for("local-kms", {"secret": "another"}).decrypt(tink.encrypt(b"data key", b""))


def test_the_secret_comes_from_the_kek_or_the_environment(monkeypatch):
    monkeypatch.delenv("LOCAL_SECRET", raising=False)
    with pytest.raises(kms.KmsError, match="cannot load secret"):
        kms.kms_for("local-kms", {})
    with pytest.raises(kms.KmsError, match="aws-kms"):
        kms.kms_for("aws-kms", {"secret": "x"})
    monkeypatch.setenv("LOCAL_SECRET", "from-env")
    wrapped = kms.kms_for("local-kms", {}).encrypt(b"k")
    assert kms.LocalKms("from-env").decrypt(wrapped) == b"k"


@pytest.mark.parametrize("algorithm", ["AES128_GCM", "AES256_GCM", "AES256_SIV"])
def test_data_keys_are_the_tink_keys_the_clients_use(algorithm):
    from confluent_kafka.schema_registry.rules.encryption.dek_registry.dek_registry_client import DekAlgorithm
    from confluent_kafka.schema_registry.rules.encryption.encrypt_executor import Cryptor
    from tink import aead, daead

    aead.register()
    daead.register()
    cryptor = Cryptor(DekAlgorithm(algorithm))
    key = kms.new_data_key(algorithm)
    assert len(key) == len(cryptor.generate_key())
    assert cryptor.decrypt(key, cryptor.encrypt(key, b"123-45-6789", b""), b"") == b"123-45-6789"
