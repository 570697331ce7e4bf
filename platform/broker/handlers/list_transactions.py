"""ListTransactions (key 66), v0–1: the transactional ids this broker coordinates, with their producer id and
state (KIP-664; v1: KIP-994's ``duration_filter``), what ``kafka-transactions.sh list`` and kafka-python's
``list_transactions`` ask every broker for.

As in Kafka: filters by state name, producer id and (v1) a transaction open longer than ``duration_filter`` ms;
a state name Kafka does not know is returned in ``unknown_state_filters`` (and matches nothing); Dead ids are
never listed; only ids the principal may Describe are listed (no error); COORDINATOR_LOAD_IN_PROGRESS while a
``__transaction_state`` partition this broker leads is still loading."""

import time

from broker.handlers.registry import handles
from broker.protocol.messages import build, nested, response_class
from broker.security import access
from broker.txn import metadata as m

KEY = 66
_BY_NAME = {name: state for state, name in m.STATE_NAMES.items()}
_KNOWN = set(_BY_NAME) | {"PrepareEpochFence"}  # Kafka's name for a state logbus keeps as PrepareAbort


@handles(KEY, "ListTransactions", 0, 1)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    state_cls = nested(cls, "TransactionState")
    names = list(request.state_filters)
    unknown = tuple(n for n in names if n not in _KNOWN)
    states = {_BY_NAME[n] for n in names if n in _BY_NAME}
    producers = set(request.producer_id_filters)
    duration = getattr(request, "duration_filter", -1)
    error, listing = await broker.txn.listing()
    now = int(time.time() * 1000)
    rows = tuple(
        build(state_cls, transactional_id=meta.transactional_id, producer_id=meta.producer_id,
              transaction_state=m.STATE_NAMES[meta.state])
        for meta in sorted(listing, key=lambda meta: meta.transactional_id)
        if meta.state != m.State.DEAD
        and (not producers or meta.producer_id in producers)
        and (not names or meta.state in states)
        and (duration < 0 or now - meta.start_ms > duration)
        and access.allowed(broker, "Describe", access.TRANSACTIONAL_ID, meta.transactional_id, quiet=True))
    return build(cls, throttle_time=0, error_code=error, unknown_state_filters=unknown, transaction_states=rows)
