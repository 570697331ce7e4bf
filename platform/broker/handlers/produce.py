"""Produce (key 0), v3–9: validate each partition's batches (magic 2, CRC-32C, sizes) and append them.

Per batch work only: headers are read with one struct call, the CRC is checked in C, and the bytes are written
as received with base offset and leader epoch patched. A partition whose bytes are invalid gets an error and
nothing of it is written; the other partitions of the request are unaffected.
"""

from broker.handlers.registry import NO_RESPONSE, RawResponse, handles
from broker.log.log import PartitionLog
from broker.log.producer_state import DuplicateSequence, InvalidProducerEpoch, OutOfOrderSequence
from broker.protocol import produce_response, records
from broker.protocol.messages import ErrorCode

KEY = 0


def append_partition(broker, topic: str, partition: int, data) -> tuple[ErrorCode, int, int, str | None]:
    """(error, base offset, log start offset, message) for one partition's record set."""
    info = broker.topics.get(topic)
    if info is None or not 0 <= partition < info.partitions:
        return ErrorCode.unknown_topic_or_partition, -1, -1, None
    if data is None:
        return ErrorCode.invalid_record, -1, -1, "null record set"
    plog: PartitionLog = broker.log_for(topic, partition)
    try:
        summary = records.validate(data, plog.config.max_message_bytes + records.LOG_OVERHEAD)
    except records.BatchTooLarge as exc:
        return ErrorCode.message_too_large, -1, plog.log_start_offset, str(exc)
    except records.InvalidBatch as exc:
        return ErrorCode.corrupt_message, -1, plog.log_start_offset, str(exc)
    try:
        base = plog.append(data, summary)
    except DuplicateSequence as dup:
        return ErrorCode.none, dup.base_offset, plog.log_start_offset, None
    except OutOfOrderSequence as exc:
        return ErrorCode.out_of_order_sequence_number, -1, plog.log_start_offset, str(exc)
    except InvalidProducerEpoch as exc:
        return ErrorCode.invalid_producer_epoch, -1, plog.log_start_offset, str(exc)
    except OSError as exc:
        return ErrorCode.kafka_storage_error, -1, plog.log_start_offset, str(exc)
    broker.notify_append(topic, partition)
    return ErrorCode.none, base, plog.log_start_offset, None


@handles(KEY, "Produce", 3, 9)
def handle(broker, header, request):
    acks = request.acks
    topics = []
    for topic in request.topic_data:
        results = []
        for pdata in topic.partition_data:
            if acks not in (0, 1, -1):
                error, base, start, message = ErrorCode.invalid_required_acks, -1, -1, None
            else:
                error, base, start, message = append_partition(broker, topic.name, pdata.index, pdata.records)
            results.append((pdata.index, error.value, base, start, message))
        topics.append((topic.name, results))
    if acks == 0:
        return NO_RESPONSE
    return RawResponse([produce_response.encode(header.api_version, header.correlation_id, topics)])
