"""The end of a run: kill -9 and read back what was acknowledged, the summary, the failure message."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, TopicPartition

from .config import ANSWER_BOUND_S, CANARY_TOPIC, COLLECT, EXAMPLES, SECONDS, SEED, STALL_BOUND_MS
from .wire import api_name

if TYPE_CHECKING:
    from .fuzzer import Fuzzer


class Report:
    """Part of :class:`~fuzz_harness.fuzzer.Fuzzer`: the checks after the run and its summary."""

    def verify_after_kill9(self) -> dict:
        """kill -9, start on the same log dir, read back every acknowledged record."""
        self.probe.flush_inflight()
        self.probe.stop()
        self.kill9_keeping_canary()
        began = time.monotonic()
        result = {"started": False, "records_checked": 0, "canary_checked": 0}
        try:
            self.start_broker()
        except Exception as exc:  # noqa: BLE001
            result["error"] = f"the broker does not start on its log dir after kill -9: {exc}"
            return result
        result["started"] = True
        result["start_seconds"] = round(time.monotonic() - began, 1)
        expected = dict(self.acked)
        expected[(CANARY_TOPIC, 0)] = {off: (None, value) for off, value in self.canary_written.items()}
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": f"verify-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        problems = []
        try:
            for (topic, partition), records in sorted(expected.items()):
                if not records:
                    continue
                last = max(records)
                consumer.assign([TopicPartition(topic, partition, min(records))])
                seen = {}
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and (not seen or max(seen) < last):
                    for m in consumer.consume(1000, timeout=1):
                        if m.error():
                            problems.append(f"{topic}/{partition}: {m.error()}")
                            break
                        seen[m.offset()] = (m.key(), m.value())
                for offset, (key, value) in sorted(records.items()):
                    got = seen.get(offset)
                    if got is None or (key is not None and got[0] != key) or got[1] != value:
                        problems.append(f"{topic}/{partition} offset {offset}: expected {(key, value)!r}, "
                                        f"read {got!r}")
                    else:
                        result["canary_checked" if topic == CANARY_TOPIC else "records_checked"] += 1
        finally:
            consumer.close()
        result["problems"] = problems[:20]
        result["problem_count"] = len(problems)
        return result

    def summary(self, verify: dict) -> dict:
        probe = self.probe
        return {
            "settings": {"max_examples": EXAMPLES, "seconds_budget": SECONDS, "seed": SEED or "derandomized",
                         "collect": COLLECT, "answer_bound_s": ANSWER_BOUND_S, "stall_bound_ms": STALL_BOUND_MS},
            "duration_s": round(time.monotonic() - self.started, 1),
            "cases": self.counts["cases"],
            "seed_cases": self.counts["seed"],
            "generated_cases": self.counts["generated"],
            "skipped": self.counts["skipped"],  # the time budget ran out, or (not COLLECT) a fatal finding
            "valid_cases": self.counts["valid"],
            "mutated_cases": self.counts["mutated"],
            "outcomes": {k: self.counts[k] for k in ("answered", "closed", "slow", "hang", "malformed",
                                                     "unanswered", "refused")},
            "crashes": self.counts["crashes"],
            "hangs": self.counts["hangs"],
            "second_client_failures": self.counts["second client failures"],
            "produce_verdicts_checked": self.counts["produce verdicts checked"],
            "invalid_batches_accepted": self.counts["invalid batches accepted"],
            "produce_verdicts": dict(self.produce_verdicts),
            "fatal_findings": len(self.findings),
            "internal_errors": self.counts["internal errors"],
            "longest_stall_ms": round(probe.longest_ms, 1) if probe else None,
            "longest_stall_during": probe.longest_at if probe else None,
            "probe_round_trips": probe.requests if probe else 0,
            "probe_errors": probe.errors if probe else 0,
            "second_client_checks": self.counts["second client checks"],
            "second_client_longest_ms": round(self.canary_longest_ms, 1),
            "peak_rss_mb": round(probe.peak_rss_kb / 1024, 1) if probe else None,
            "advertised": {api_name(k): list(v) for k, v in sorted(self.advertised.items())},
            "per_api": {k: dict(v) for k, v in sorted(self.per_api.items())},
            "restarts": self.restarts,
            "slow_cases": self.slow,
            "slowest_cases_ms": self.slowest,
            "after_kill9": verify,
            "findings": [{k: v for k, v in f.items() if k != "frame_len"} for f in self.findings.values()],
            "internal_error_kinds": [{k: v for k, v in e.items() if k != "frame_len"}
                                     for e in sorted(self.internal_errors.values(), key=lambda e: -e["count"])],
        }


def _failure_message(fuzzer: Fuzzer) -> str:
    parts = []
    for f in fuzzer.findings.values():
        parts.append(f"[{f['kind']}] {f['detail']}\n  case: {f['case']}\n  seen {f['count']} time(s)\n"
                     f"  frame (hex): {f['frame_hex']}\n"
                     + (f"  the frame before it: {f['previous_frame_hex']}\n" if f["previous_frame_hex"] else "")
                     + "  broker log tail:\n    " + f["log_tail"].replace("\n", "\n    "))
    return "\n\n".join(parts)
