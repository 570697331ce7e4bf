"""InitProducerId (key 22), v0–4: producer ids for idempotent producers (transactions are not supported)."""

from broker.handlers.registry import handles
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
    return build(cls, throttle_time=0, error_code=0, producer_id=await broker.next_producer_id(),
                 producer_epoch=0)
