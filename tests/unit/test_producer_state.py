import pytest
from broker.log.producer_state import (
    DuplicateSequence,
    InvalidProducerEpoch,
    OutOfOrderSequence,
    ProducerStateManager,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_duplicates_gaps_and_epochs():
    state = ProducerStateManager()
    state.check(7, 0, 0, 4)
    state.update(7, 0, 0, 4, base_offset=100)
    with pytest.raises(DuplicateSequence) as dup:
        state.check(7, 0, 0, 4)
    assert dup.value.base_offset == 100
    with pytest.raises(OutOfOrderSequence):
        state.check(7, 0, 9, 9)
    state.check(7, 0, 5, 5)
    with pytest.raises(OutOfOrderSequence):
        state.check(7, 1, 3, 3)  # a new epoch starts at sequence 0
    state.update(7, 1, 0, 0, 200)
    with pytest.raises(InvalidProducerEpoch):
        state.check(7, 0, 5, 5)  # the old epoch is fenced
    state.check(-1, -1, -1, -1)  # non-idempotent batches are never checked
