"""AddPartitionsToTxn (key 24), v0–3: a transactional producer names the partitions it is about to write to
(v4+ is KIP-890's broker-to-broker verification: not advertised). Unknown topics get UNKNOWN_TOPIC_OR_PARTITION
and the others of the request OPERATION_NOT_ATTEMPTED, as Kafka answers."""

from broker.handlers.registry import handles
from broker.handlers.txn_errors import for_version
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 24


@handles(KEY, "AddPartitionsToTxn", 0, 3)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "AddPartitionsToTxnTopicResult")
    partition_cls = nested(cls, "AddPartitionsToTxnPartitionResult")
    wanted = {t.name: set(t.partitions) for t in request.v3_and_below_topics}
    unknown = {(name, p) for name, parts in wanted.items() for p in parts
               if (info := broker.topics.get(name)) is None or not 0 <= p < info.partitions}
    txn_id = request.v3_and_below_transactional_id
    unwritable = {name for name in wanted if not access.allowed(broker, "Write", access.TOPIC, name)}
    if not access.allowed(broker, "Write", access.TRANSACTIONAL_ID, txn_id):
        errors = {(n, p): ErrorCode.transactional_id_authorization_failed for n, parts in wanted.items()
                  for p in parts}
    elif unwritable:
        errors = {(n, p): ErrorCode.topic_authorization_failed if n in unwritable
                  else ErrorCode.operation_not_attempted for n, parts in wanted.items() for p in parts}
    elif unknown:
        errors = {(n, p): ErrorCode.unknown_topic_or_partition if (n, p) in unknown
                  else ErrorCode.operation_not_attempted for n, parts in wanted.items() for p in parts}
    else:
        error = await broker.txn.add_partitions(request.v3_and_below_transactional_id,
                                                request.v3_and_below_producer_id,
                                                request.v3_and_below_producer_epoch, wanted)
        error = for_version(error, header.api_version)
        errors = {(n, p): error for n, parts in wanted.items() for p in parts}
    results = tuple(build(topic_cls, name=name, results_by_partition=tuple(
        build(partition_cls, partition_index=p, partition_error_code=errors[(name, p)]) for p in sorted(parts)))
        for name, parts in wanted.items())
    return build(cls, throttle_time=0, results_by_topic_v3_and_below=results)
