"""Error codes of the transactional APIs as each request version knows them: PRODUCER_FENCED (90) exists for
InitProducerId v4+ and EndTxn / AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit v2+; older versions are
told INVALID_PRODUCER_EPOCH (47), as Kafka's KafkaApis maps it."""

from broker.protocol.messages import ErrorCode


def for_version(error: ErrorCode, version: int, fenced_since: int = 2) -> ErrorCode:
    if error == ErrorCode.producer_fenced and version < fenced_since:
        return ErrorCode.invalid_producer_epoch
    return error
