"""One module per Kafka API; importing this package registers them all in :mod:`broker.handlers.registry`."""

from broker.handlers import (  # noqa: F401  (imported for registration)
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_user_scram_credentials,
    api_versions,
    create_partitions,
    create_topics,
    delete_topics,
    describe_configs,
    describe_groups,
    describe_user_scram_credentials,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from broker.handlers.registry import APIS, NO_RESPONSE, RawResponse

__all__ = ["APIS", "NO_RESPONSE", "RawResponse"]
