"""The restart policy of ``logbus up``'s supervisors (compose's ``unless-stopped`` with Docker's backoff shape):
1 s doubling to a cap, afresh after a long enough run; and how a last exit code reads."""

import pytest
from logbus.local import BACKOFF_CAP, BACKOFF_INITIAL, BACKOFF_RESET, backoff, exit_text

pytestmark = pytest.mark.unit


def test_backoff_doubles_from_one_second_up_to_the_cap():
    delays = [backoff(n) for n in range(1, 10)]
    assert delays[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert delays[5:] == [BACKOFF_CAP] * 4
    assert (BACKOFF_INITIAL, BACKOFF_CAP) == (1.0, 30.0) and BACKOFF_RESET >= 10
    assert all(a <= b for a, b in zip(delays, delays[1:]))


def test_backoff_of_a_first_crash_and_of_a_long_streak():
    assert backoff(0) == backoff(1) == BACKOFF_INITIAL  # the first restart (or one after a long run)
    assert backoff(10_000) == BACKOFF_CAP  # no overflow, no growth past the cap


def test_exit_text():
    assert exit_text(None) == ""
    assert exit_text(0) == "code 0"
    assert exit_text(2) == "code 2"
    assert exit_text(-9) == "SIGKILL"
    assert exit_text(-15) == "SIGTERM"
    assert exit_text(-200) == "signal 200"
