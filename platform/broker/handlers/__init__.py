"""One module per Kafka API; importing this package registers them all in :mod:`broker.handlers.registry`."""

from broker.handlers import (  # noqa: F401  (imported for registration)
    api_versions,
    create_topics,
    delete_topics,
    describe_configs,
    fetch,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
)
from broker.handlers.registry import APIS, NO_RESPONSE, RawResponse

__all__ = ["APIS", "NO_RESPONSE", "RawResponse"]
