"""InitProducerId (key 22), v0–4: producer ids for idempotent producers; with a transactional id, the
transaction coordinator's (:mod:`broker.txn.coordinator`: epochs, fencing of older instances).
A new block of ids the disk refuses to record is COORDINATOR_NOT_AVAILABLE, which producers retry."""

from broker.handlers.registry import handles
from broker.handlers.txn_errors import for_version
from broker.log.storage_errors import incidents
from broker.protocol.messages import ErrorCode, build, ms, response_class
from broker.security import access

KEY = 22


@handles(KEY, "InitProducerId", 0, 4)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if request.transactional_id is not None:
        if not access.allowed(broker, "Write", access.TRANSACTIONAL_ID, request.transactional_id):
            return build(cls, throttle_time=0, error_code=ErrorCode.transactional_id_authorization_failed,
                         producer_id=-1, producer_epoch=-1)
        error, producer_id, epoch = await broker.txn.init_producer_id(
            request.transactional_id, ms(request.transaction_timeout), producer_id, epoch)
        return build(cls, throttle_time=0, error_code=for_version(error, header.api_version, fenced_since=4),
                     producer_id=producer_id, producer_epoch=epoch)
    # Without a transactional id Kafka always hands out a new producer id, epoch 0, whatever producer id and epoch
    # the request names (KIP-360's bump is for transactional ids): no client can take over another's producer id,
    # and no epoch ever nears its 32767 limit here.
    if not (access.on_cluster(broker, "IdempotentWrite", quiet=True)  # KIP-679: or Write on some topic
            or access.allowed_on_some(broker, "Write", access.TOPIC)):
        return build(cls, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, producer_id=-1,
                     producer_epoch=-1)
    try:
        producer_id = await broker.next_producer_id()
    except OSError as exc:  # standalone: the next producer-id block cannot be recorded (a full disk)
        incidents.failed(f"producer-id blocks in {broker.log_dirs[0]}", exc)
        return build(cls, throttle_time=0, error_code=ErrorCode.coordinator_not_available, producer_id=-1,
                     producer_epoch=-1)
    return build(cls, throttle_time=0, error_code=0, producer_id=producer_id, producer_epoch=0)
