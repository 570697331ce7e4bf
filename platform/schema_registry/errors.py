"""Confluent's error codes and the registry's domain error (the HTTP layer maps a code to its status: the code
itself below 1000, else its first three digits)."""

from __future__ import annotations

SUBJECT_NOT_FOUND, VERSION_NOT_FOUND, SCHEMA_NOT_FOUND = 40401, 40402, 40403
SUBJECT_SOFT_DELETED, SUBJECT_NOT_SOFT_DELETED = 40404, 40405
VERSION_SOFT_DELETED, VERSION_NOT_SOFT_DELETED = 40406, 40407
SUBJECT_CONFIG_NOT_FOUND, SUBJECT_MODE_NOT_FOUND = 40408, 40409
INVALID_SCHEMA, INVALID_VERSION, INVALID_LEVEL, INVALID_MODE, NOT_PERMITTED = 42201, 42202, 42203, 42204, 42205
INVALID_SUBJECT, CONTEXT_NOT_EMPTY = 42208, 42211
INCOMPATIBLE = 409
STORE_ERROR, STORE_TIMEOUT, FORWARD_ERROR = 50001, 50002, 50003


class RegistryError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def status(self) -> int:
        return self.code if self.code < 1000 else self.code // 100
