"""The fuzz run's settings (LOGBUS_FUZZ_* environment variables, see tests/integration/test_fuzz.py) and bounds."""

from __future__ import annotations

import os

_EXAMPLES_SET = "LOGBUS_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("LOGBUS_FUZZ_EXAMPLES", "3000"))
SECONDS = float(os.environ.get("LOGBUS_FUZZ_SECONDS", "0" if _EXAMPLES_SET else "45")) or None
SEED = os.environ.get("LOGBUS_FUZZ_SEED")
COLLECT = os.environ.get("LOGBUS_FUZZ_COLLECT") == "1"
SEEDS = os.environ.get("LOGBUS_FUZZ_SEEDS", "1") != "0"
REPORT = os.environ.get("LOGBUS_FUZZ_REPORT")
ANSWER_BOUND_S = 10.0  # a fuzzed request is answered or its connection closed within this
WAITING_BOUND_S = 15.0  # ... for Fetch, JoinGroup and SyncGroup, which may wait by design
STALL_BOUND_MS = 2000.0  # the longest round trip the latency probe may see
KNOWN_RECORDS = 2000
PROTECTED = {"keep-plain": ("none", 2), "keep-gzip": ("gzip", 2), "keep-zstd": ("zstd", 1)}
CANARY_TOPIC = "canary"
BROKER_SETTINGS = {"num_partitions": 1, "group_initial_rebalance_delay_ms": 0, "log_cleaner_backoff_ms": 1000}
