"""A stand-in for :class:`mirror.wire.Pool` (connections by broker id) for unit tests of the blocking Fetch
readers: each request sent is answered by ``answer(topic, FetchPartition)``, which returns a partition's answer."""

from __future__ import annotations

from types import SimpleNamespace as NS


class FakeConn:
    def __init__(self, answer):
        self.answer, self.pending, self.sent = answer, [], []

    def send(self, api_key, version, request):
        self.pending.append(request)
        self.sent.append(request)

    def receive(self):
        request = self.pending.pop(0)
        return NS(responses=[NS(topic=t.topic, partitions=[self.answer(t.topic, p) for p in t.partitions])
                             for t in request.topics])


class FakePool:
    def __init__(self, answer):
        self.answer, self.connections, self.addresses, self.dropped = answer, {}, {}, []

    def get(self, node):
        if node not in self.connections:
            self.connections[node] = FakeConn(self.answer)
        return self.connections[node]

    def drop(self, node):
        self.dropped.append(node)
        self.connections.pop(node, None)

    def close(self):
        self.connections.clear()
