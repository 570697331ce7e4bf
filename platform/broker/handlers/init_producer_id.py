"""InitProducerId (key 22), v0–4: producer ids for idempotent producers (transactions are not supported).
A new block of ids the disk refuses to record is COORDINATOR_NOT_AVAILABLE, which producers retry."""

from broker.handlers.registry import handles
from broker.log.storage_errors import incidents
from broker.protocol.messages import ErrorCode, build, response_class

KEY = 22


@handles(KEY, "InitProducerId", 0, 4)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    if request.transactional_id is not None:
        return build(cls, throttle_time=0, error_code=ErrorCode.transactional_id_authorization_failed,
                     producer_id=-1, producer_epoch=-1)
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and epoch >= 0:  # KIP-360: bump the epoch of a known producer id
        return build(cls, throttle_time=0, error_code=0, producer_id=producer_id, producer_epoch=epoch + 1)
    try:
        producer_id = await broker.next_producer_id()
    except OSError as exc:  # standalone: the next producer-id block cannot be recorded (a full disk)
        incidents.failed(f"producer-id blocks in {broker.log_dirs[0]}", exc)
        return build(cls, throttle_time=0, error_code=ErrorCode.coordinator_not_available, producer_id=-1,
                     producer_epoch=-1)
    return build(cls, throttle_time=0, error_code=0, producer_id=producer_id, producer_epoch=0)
