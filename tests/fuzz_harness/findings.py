"""What the fuzzer finds: tracebacks in the broker log (counted) and fatal findings (grouped by signature)."""

from __future__ import annotations

import re

from .wire import frame_hex


class Findings:
    """Part of :class:`~fuzz_harness.fuzzer.Fuzzer`: the broker log and what is recorded from it."""

    def scan_log(self, frame: bytes) -> list[str]:
        """Tracebacks the broker logged since the last case: internal errors (counted, not fatal).

        Returns their signatures."""
        found: list[str] = []
        try:
            with open(self.broker.output, "rb") as f:
                f.seek(self.log_pos)
                new = f.read()
        except OSError:
            return found
        self.log_pos += len(new)
        text = new.decode(errors="replace")
        for block in re.findall(r"Traceback \(most recent call last\):\n(?:[ \t].*\n)+\S.*", text):
            lines = block.splitlines()
            where = [ln.strip() for ln in lines if ln.strip().startswith("File ") and "/platform/" in ln]
            last = lines[-1].strip()
            signature = _normalize(f"{last[:160]} at {where[-1].split('/platform/')[-1] if where else '?'}")
            self.counts["internal errors"] += 1
            if signature not in found:
                found.append(signature)
            entry = self.internal_errors.get(signature)
            if entry is None or len(frame) < entry["frame_len"]:
                self.internal_errors[signature] = {
                    "signature": signature, "count": (entry or {}).get("count", 0), "case": self.current,
                    "frame_hex": frame_hex(frame, 2048), "frame_len": len(frame),
                    "traceback": "\n".join(lines[-8:])}
            self.internal_errors[signature]["count"] += 1
        return found

    def death_line(self) -> str:
        """The line of this process's output that says why it died (and the native frame, for an abort)."""
        try:
            with open(self.broker.output, "rb") as f:
                f.seek(self.incarnation_pos)
                lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        for i, line in enumerate(lines):
            if re.search(r"memory allocation of|panicked at|Fatal Python error|Segmentation fault", line):
                frames = [ln.split(":", 1)[1].strip() for ln in lines[i + 1:i + 40]
                          if re.match(r"\s*\d+: ", ln) and not re.search(r"\d+: (std|core|alloc|__rust|rust_)", ln)]
                message = line.strip() if "panicked" not in line else " ".join(
                    ln.strip() for ln in lines[i:i + 2])
                return (message + (f" in {frames[0]}" if frames else ""))[:300]
        interesting = [ln for ln in lines[-40:] if re.search(
            r"Error|error|Killed|abort|Too many open files|Exception", ln)]
        return (interesting or lines or ["(empty log)"])[-1].strip()[:300]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.broker.log_text().splitlines()[-lines:])

    def record_fatal(self, kind: str, detail: str, frame: bytes, case: str) -> None:
        signature = _normalize(f"{kind}: {detail}")[:300]
        entry = self.findings.get(signature)
        if entry is None or len(frame) < entry["frame_len"]:
            self.findings[signature] = {
                "kind": kind, "signature": signature, "detail": detail, "case": case,
                "count": (entry or {}).get("count", 0), "frame_hex": frame_hex(frame), "frame_len": len(frame),
                "previous_frame_hex": frame_hex(self.recent[-2], 256) if len(self.recent) > 1 else None,
                "log_tail": self.log_tail()}
        self.findings[signature]["count"] += 1


def _normalize(text: str) -> str:
    """A signature: numbers, hex and addresses replaced so that one kind of failure groups together."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>", text)
    text = re.sub(r"'[^']{0,80}'", "'…'", text)
    return re.sub(r"\d+", "N", text)
