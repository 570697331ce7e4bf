"""A stand-in for confluent-kafka's ``Message`` (what a consumer hands over) for unit tests and in-process
benchmarks: the accessors the code under test calls, nothing else."""

from __future__ import annotations


class FakeMessage:
    def __init__(self, topic, partition, offset, error=None, headers=None):
        self._t, self._p, self._o, self._e, self._h = topic, partition, offset, error, headers

    def error(self):
        return self._e

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def headers(self):
        return self._h if self._h is not None else []

    def key(self):
        return b"k"

    def value(self):
        return b"v"

    def timestamp(self):
        return (1, 1000)
