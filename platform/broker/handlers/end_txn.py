"""EndTxn (key 26), v0–3: commit or abort. Answered once the decision (PrepareCommit / PrepareAbort) is committed
in ``__transaction_state``; the markers follow in the background."""

from broker.handlers.registry import handles
from broker.handlers.txn_errors import for_version
from broker.protocol.messages import ErrorCode, build, response_class
from broker.security import access

KEY = 26


@handles(KEY, "EndTxn", 0, 3)
async def handle(broker, header, request):
    if not access.allowed(broker, "Write", access.TRANSACTIONAL_ID, request.transactional_id):
        return build(response_class(KEY, header.api_version), throttle_time=0,
                     error_code=ErrorCode.transactional_id_authorization_failed)
    error = await broker.txn.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                     bool(request.committed))
    return build(response_class(KEY, header.api_version), throttle_time=0,
                 error_code=for_version(error, header.api_version))
