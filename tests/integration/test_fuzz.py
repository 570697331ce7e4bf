"""Fuzzing a real broker process: it must survive every request, keep serving, and keep what it acknowledged.

One standalone broker (free port, data under tmp_path) gets, in order:

1. 2,000 records produced with confluent-kafka (``acks=all``; topics ``keep-plain``, ``keep-gzip``,
   ``keep-zstd``); what was acknowledged is remembered.
2. Seed cases (``fuzzing.seed_cases``): hand-written hostile frames that broke the broker before (a compact
   array count of 2^32-2, a consumer subscription that loops, compression bombs, ...).
3. Generated cases (hypothesis): for every (api key, version) the broker advertises in ApiVersions, a valid
   request built from kio's request dataclass, encoded with kio, then usually mutated (lengths, counts,
   varints, tagged fields, truncation, trailing garbage, the frame size, byte flips, and the record batches of
   Produce field by field). About a third stay valid (or only gain an unknown tagged field, which KIP-482 says
   to skip): those must get a response, not a closed connection.

After every case: the broker process is alive; the fuzzing connection got a well-formed response frame (size
prefix consistent, its correlation id, decodable by kio, nothing partial after it) or was closed, within 10 s
(15 s for the APIs that may wait: Fetch, JoinGroup, SyncGroup); a second connection, open across cases,
produces a record and fetches it back at the offset it was given. When a Produce whose only mutations are in
its record batches is answered, each partition's error must fit the batch (``fuzzing.batch_problems``: error 0
only for batches Kafka's validator would keep). All along a latency probe (another connection) does
ApiVersions/Metadata round trips every 20 ms and keeps the longest, and the broker's RSS is sampled. At the
end the broker gets ``kill -9`` and is started again on the same log dir: every record acknowledged before (and
every record of the second connection) must read back with the same offset, key and value. Tracebacks in the
broker log (a handler's TypeError, say: the connection is closed, which is allowed) are counted and listed in
the summary, not failed on.

Settings (environment variables):

- ``LOGBUS_FUZZ_EXAMPLES``: generated cases (default 3000, drawn over every advertised API key and version:
  about 12 ms each, so about a minute for the whole file on a 2-core machine; bench/fuzz_run.py runs 20,000).
  Setting it also lifts the default time budget: e.g. ``LOGBUS_FUZZ_EXAMPLES=50000`` for a longer local run.
- ``LOGBUS_FUZZ_SECONDS``: time budget of the generated cases (default 45 s without LOGBUS_FUZZ_EXAMPLES,
  none with it): on a slower machine the cases left when it runs out are skipped and counted, so the run stays
  bounded; the cases are the same on every run, only where the run stops may differ.
- ``LOGBUS_FUZZ_SEED``: a hypothesis seed (default: derandomized, the same cases on every run).
- ``LOGBUS_FUZZ_SEEDS=0``: skip the seed cases (to explore past a known failure).
- ``LOGBUS_FUZZ_REPORT``: write the summary JSON there (it is printed too: run pytest with ``-s``).
- ``LOGBUS_FUZZ_COLLECT=1``: diagnostic mode. A case that kills or hangs the broker is recorded and the broker
  restarted (on the same log dir; on a fresh one if it cannot start), so one run collects every distinct
  failure; the summary lists each kind once with its shortest frame. The test still fails if any were found.
  Without it the run stops at the first dead or hung broker and the failure shows the frame that did it.

A longer run, e.g.: ``bench/fuzz_run.py --examples 20000`` (see there), or
``LOGBUS_FUZZ_EXAMPLES=20000 LOGBUS_FUZZ_REPORT=bench/results/fuzz.json .venv/bin/python -m pytest
tests/integration/test_fuzz.py -s``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

import fuzzing

pytest.register_assert_rewrite("fuzz_harness")  # its asserts read as they did when they were in this file

from fuzz_harness.config import (  # noqa: E402
    COLLECT,
    EXAMPLES,
    KNOWN_RECORDS,
    REPORT,
    SECONDS,
    SEED,
    SEEDS,
    STALL_BOUND_MS,
)
from fuzz_harness.fuzzer import Fuzzer  # noqa: E402
from fuzz_harness.report import _failure_message  # noqa: E402

_budget = (SECONDS if SECONDS else EXAMPLES * 0.3) + (1800 if COLLECT else 0)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(int(_budget + 420))]


class _Enough(Exception):
    """The time budget is spent, or (not COLLECT) a fatal finding stopped the run."""


def test_fuzz_broker(fresh_broker):
    fuzzer = Fuzzer(fresh_broker)
    fuzzer.start()
    try:
        for case in fuzzing.seed_cases() if SEEDS else ():
            if fuzzer.stopped:
                break
            fuzzer.run_case(case, "seed")

        fuzzer.deadline = time.monotonic() + SECONDS if SECONDS else None
        strategy = fuzzing.cases(fuzzer.advertised)

        @settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED is None, database=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck), print_blob=False)
        @given(st.data())
        def generated(data):
            case = data.draw(strategy)  # always drawn: hypothesis refuses a case that draws less on a re-run
            if fuzzer.stopped or (fuzzer.deadline is not None and time.monotonic() > fuzzer.deadline):
                raise _Enough()  # ends the run at once (the same on hypothesis's re-run of this case)
            fuzzer.run_case(case, "generated")

        if SEED is not None:
            generated = seed(int(SEED))(generated)
        try:
            generated()
        except _Enough:
            pass
        verify = fuzzer.verify_after_kill9()
    except BaseException:
        if fuzzer.probe is not None:
            fuzzer.probe.stop()
        raise
    summary = fuzzer.summary(verify)
    text = json.dumps(summary, indent=2, default=str)
    if REPORT:
        Path(REPORT).parent.mkdir(parents=True, exist_ok=True)
        Path(REPORT).write_text(text + "\n")
    print("\n" + text)

    errors = []
    if fuzzer.findings:
        errors.append(f"{summary['crashes']} crash(es), {len(fuzzer.findings)} distinct finding(s) in "
                      f"{summary['cases']} cases:\n\n" + _failure_message(fuzzer))
    if not verify["started"]:
        errors.append(verify["error"])
    elif verify["problem_count"] or verify["records_checked"] != KNOWN_RECORDS:
        errors.append(f"after kill -9 and a restart, {verify['records_checked']} of {KNOWN_RECORDS} acknowledged "
                      f"records read back; {verify['problem_count']} problem(s): {verify['problems']}")
    if summary["longest_stall_ms"] >= STALL_BOUND_MS:
        errors.append(f"the latency probe waited {summary['longest_stall_ms']} ms for one round trip "
                      f"(bound {STALL_BOUND_MS:.0f} ms), during {summary['longest_stall_during']}")
    if errors:
        pytest.fail("\n\n".join(errors), pytrace=False)
    assert summary["crashes"] == 0
