"""DescribeClientQuotas (key 48), v0–1: the quota entities that pass a filter, with their quota configs (read
from ZooKeeper, or the standalone file, at the time of the request: what an admin just altered is there).
DescribeConfigs on the cluster is needed (Kafka's ACL); the filter's errors are Kafka's
(:mod:`broker.client_quotas.entities`)."""

from broker.client_quotas import entities, store
from broker.client_quotas.entities import QuotaError
from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 48


async def stored(broker) -> dict[str, dict]:
    if broker.cluster is not None:
        zk = broker.cluster.zk
        return await zk.call(store.read_all_zk, zk.client)
    return store.read_all_file(broker.log_dirs[0])


@handles(KEY, "DescribeClientQuotas", 0, 1)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    if not access.on_cluster(broker, "DescribeConfigs"):
        return build(cls, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed,
                     error_message="Cluster authorization failed.", entries=None)
    entry_cls, entity_cls, value_cls = (nested(cls, n) for n in ("EntryData", "EntityData", "ValueData"))
    try:
        found = entities.describe(await stored(broker),
                                  [(c.entity_type, int(c.match_type), c.match) for c in request.components],
                                  request.strict)
    except QuotaError as exc:
        return build(cls, throttle_time=0, error_code=ErrorCode[exc.error], error_message=str(exc), entries=None)
    entries = tuple(build(entry_cls,
                          entity=tuple(build(entity_cls, entity_type=kind, entity_name=name) for kind, name in parts),
                          values=tuple(build(value_cls, key=key, value=value) for key, value in sorted(values.items())))
                    for parts, values in found)
    return build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, entries=entries)
