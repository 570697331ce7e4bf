"""AlterClientQuotas (key 49), v0–1: set or remove quota configs of entities (``kafka-configs --alter
--entity-type clients|users|ips``; ``logbus configs``). Written where Kafka writes them (ZooKeeper with a change
notification every broker picks up, or the standalone file), each entity on its own: an entry Kafka would refuse
is answered with its error and writes nothing, the others are applied. ``validate_only`` checks and writes
nothing. AlterConfigs on the cluster is needed (Kafka's ACL)."""

from broker.client_quotas import entities, store
from broker.client_quotas.entities import QuotaError
from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 49


@handles(KEY, "AlterClientQuotas", 0, 1)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    entry_cls, entity_cls = nested(cls, "EntryData"), nested(cls, "EntityData")
    allowed = access.on_cluster(broker, "AlterConfigs")
    seen: set[str] = set()
    changed = False
    out = []
    for entry in request.entries:
        error, message = ErrorCode.none, None
        try:
            if not allowed:
                raise QuotaError("cluster_authorization_failed", "Cluster authorization failed.")
            path = entities.entity_path([(e.entity_type, e.entity_name) for e in entry.entity])
            if path in seen:
                raise QuotaError("invalid_request", f"Ignoring duplicate entity {path}")
            seen.add(path)
            ops = [(op.key, float(op.value), bool(op.remove)) for op in entry.ops]
            if broker.cluster is not None:
                zk = broker.cluster.zk
                await zk.call(store.alter_zk, zk.client, path, ops, request.validate_only)
            else:
                store.alter_file(broker.log_dirs[0], path, ops, request.validate_only)
            changed = changed or not request.validate_only
        except QuotaError as exc:
            error, message = ErrorCode[exc.error], str(exc)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away: this entry failed, the broker serves on
            error, message = ErrorCode.unknown_server_error, f"storing the quota failed: {exc}"
        out.append(build(entry_cls, error_code=error, error_message=message,
                         entity=tuple(build(entity_cls, entity_type=e.entity_type, entity_name=e.entity_name)
                                      for e in entry.entity)))
    if changed and broker.cluster is None:
        broker.quota_watcher.reload_file()  # cluster mode: every broker (this one too) reloads on the notification
    return build(cls, throttle_time=0, entries=tuple(out))
