"""AddOffsetsToTxn (key 25), v0–3: the producer will commit a consumer group's offsets in its transaction
(``send_offsets_to_transaction``); TxnOffsetCommit to the group's coordinator follows."""

from broker.handlers.registry import handles
from broker.handlers.txn_errors import for_version
from broker.protocol.messages import ErrorCode, build, response_class
from broker.security import access

KEY = 25


@handles(KEY, "AddOffsetsToTxn", 0, 3)
async def handle(broker, header, request):
    if not access.allowed(broker, "Write", access.TRANSACTIONAL_ID, request.transactional_id):
        return build(response_class(KEY, header.api_version), throttle_time=0,
                     error_code=ErrorCode.transactional_id_authorization_failed)
    if not access.allowed(broker, "Read", access.GROUP, request.group_id):
        return build(response_class(KEY, header.api_version), throttle_time=0,
                     error_code=ErrorCode.group_authorization_failed)
    error = await broker.txn.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                         request.group_id)
    return build(response_class(KEY, header.api_version), throttle_time=0,
                 error_code=for_version(error, header.api_version))
