"""A fuzz case: a valid request's node trees, the mutations applied to them, and the frame it renders to."""

from __future__ import annotations

import dataclasses
import struct

from .encoder import Node, render


@dataclasses.dataclass(eq=False)
class Case:
    api_key: int
    version: int
    flexible: bool
    request: object
    header: Node
    body: Node
    mutations: list = dataclasses.field(default_factory=list)
    size_override: int | None = None
    stale_size: bool = False  # truncated after the size prefix was computed: the frame is short
    cut: int | None = None
    trailing_in: bytes = b""
    trailing_after: bytes = b""
    flips: list = dataclasses.field(default_factory=list)
    fixed_frame: bytes | None = None  # seed cases: the whole frame as is
    kinds: list = dataclasses.field(default_factory=list)  # the mutation kinds applied
    conforming: bool = False  # mutated, yet still a valid request (an unknown tagged field: KIP-482 skips it)

    @property
    def valid(self) -> bool:
        return not self.mutations and self.fixed_frame is None

    def payload(self) -> bytes:
        out = bytearray()
        render(self.header, out)
        render(self.body, out)
        out += self.trailing_in
        for pos, xor in self.flips:
            if out:
                out[pos % len(out)] ^= xor
        return bytes(out)

    def frame(self) -> bytes:
        if self.fixed_frame is not None:
            return self.fixed_frame
        payload = self.payload()
        size = len(payload)
        if self.cut is not None:
            payload = payload[:self.cut % (len(payload) + 1)]
            if not self.stale_size:
                size = len(payload)
        if self.size_override is not None:
            size = self.size_override
        return struct.pack(">i", size) + payload + self.trailing_after

    def describe(self) -> str:
        what = f"api {self.api_key} v{self.version}"
        if not self.mutations:
            return what + " (valid)"
        return what + (" (still valid)" if self.conforming else "") + ": " + "; ".join(self.mutations)

    def expects_answer(self) -> bool:
        """A valid request the broker must answer (Produce with acks=0 gets no response)."""
        if not (self.valid or self.conforming):
            return False
        return not (self.api_key == 0 and getattr(self.request, "acks", 1) == 0)


def fixed_case(api_key: int, version: int, frame: bytes, description: str) -> Case:
    case = Case(api_key, version, False, None, Node("struct"), Node("struct"), [description])
    case.fixed_frame = frame
    return case


def produced_records(case: Case) -> dict[tuple[str, int], bytes | None] | None:
    """(topic, partition) -> the records bytes a Produce case sends, when nothing but its records was mutated
    (None when the request cannot be read that way: other mutations, or a partition named twice)."""
    if case.api_key != 0 or case.fixed_frame is not None or any(k != "records" for k in case.kinds):
        return None
    out: dict[tuple[str, int], bytes | None] = {}
    topics = next((n for n in case.body.children if n.name == "topic_data"), None)
    for topic in (topics.children if topics is not None else []):
        fields = {n.name: n for n in topic.children}
        name = (fields["name"].data or b"").decode("utf-8", "replace")
        for part in fields["partition_data"].children:
            pfields = {n.name: n for n in part.children}
            key = (name, struct.unpack(">i", pfields["index"].data)[0])
            if key in out:
                return None
            rec = pfields["records"]
            out[key] = rec.content if rec.content is not None else rec.data
    return out
