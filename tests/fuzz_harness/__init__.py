"""The broker side of the fuzz test (tests/integration/test_fuzz.py, whose docstring describes the run).

``config`` (the LOGBUS_FUZZ_* settings and the bounds), ``wire`` (frames, names, RSS), ``probe`` (the latency
probe), ``canary`` (the second client), ``fuzzer`` (:class:`Fuzzer`: one case at a time), with its parts
``lifecycle`` (starting and restarting the broker), ``findings`` (the broker log, fatal findings) and
``report`` (kill -9 and read back, the summary, the failure message). The requests come from ``fuzzing``.
"""
