"""DescribeTransactions (key 65), v0: each transactional id's state as its coordinator holds it — state name,
producer id and epoch, timeout, start time (-1: no transaction open) and partitions (KIP-664, what
``kafka-transactions.sh describe`` and kafka-python's ``describe_transactions`` show).

As in Kafka: Describe on the TransactionalId or TRANSACTIONAL_ID_AUTHORIZATION_FAILED; NOT_COORDINATOR on a broker
that does not coordinate the id; TRANSACTIONAL_ID_NOT_FOUND for an unknown one; only the topics the principal may
Describe are listed; an entry with an error carries the schema's defaults (0 for the numbers), a transaction not open
now the start time -1, as Kafka's. A group's offsets in the transaction (AddOffsetsToTxn) are not listed: Kafka lists them as a
``__consumer_offsets`` partition, which logbus does not have (its offsets live in ZooKeeper)."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access
from broker.txn import metadata as m

KEY = 65


@handles(KEY, "DescribeTransactions", 0, 0)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    state_cls = nested(cls, "TransactionState")
    topic_cls = nested(cls, "TopicData")
    out = []
    for tid in request.transactional_ids:
        meta = None
        if not access.allowed(broker, "Describe", access.TRANSACTIONAL_ID, tid):
            error = ErrorCode.transactional_id_authorization_failed
        else:
            error, meta = await broker.txn.describe(tid)
        if meta is None:
            out.append(build(state_cls, error_code=error, transactional_id=tid, transaction_state="",
                             transaction_timeout=0, transaction_start_time=0, producer_id=0,
                             producer_epoch=0, topics=()))
            continue
        topics = tuple(build(topic_cls, topic=topic, partitions=tuple(sorted(parts)))
                       for topic, parts in sorted(meta.partitions.items())
                       if not topic.startswith(m.GROUP_PREFIX)
                       and access.allowed(broker, "Describe", access.TOPIC, topic, quiet=True))
        out.append(build(state_cls, error_code=ErrorCode.none, transactional_id=tid,
                         transaction_state=m.STATE_NAMES[meta.state], transaction_timeout=meta.timeout_ms,
                         transaction_start_time=meta.start_ms, producer_id=meta.producer_id,
                         producer_epoch=meta.producer_epoch, topics=topics))
    return build(cls, throttle_time=0, transaction_states=tuple(out))
