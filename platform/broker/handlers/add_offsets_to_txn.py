"""AddOffsetsToTxn (key 25), v0–3: the producer will commit a consumer group's offsets in its transaction
(``send_offsets_to_transaction``); TxnOffsetCommit to the group's coordinator follows."""

from broker.handlers.registry import handles
from broker.handlers.txn_errors import for_version
from broker.protocol.messages import build, response_class

KEY = 25


@handles(KEY, "AddOffsetsToTxn", 0, 3)
async def handle(broker, header, request):
    error = await broker.txn.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                         request.group_id)
    return build(response_class(KEY, header.api_version), throttle_time=0,
                 error_code=for_version(error, header.api_version))
