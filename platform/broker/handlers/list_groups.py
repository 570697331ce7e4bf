"""ListGroups (key 16), v0–4: the groups this broker coordinates (v4: filtered by state), those known only by
their committed offsets included (as Empty, as Kafka lists them)."""

from broker.handlers.registry import handles
from broker.protocol.messages import build, nested, response_class
from broker.security import access

KEY = 16


@handles(KEY, "ListGroups", 0, 4)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    listed_cls = nested(cls, "ListedGroup")
    states = set(getattr(request, "states_filter", ()) or ())
    everything = access.on_cluster(broker, "Describe", quiet=True)  # else only the groups it may Describe, no error
    listed = await broker.groups.listed()
    groups = tuple(build(listed_cls, group_id=g.group_id, protocol_type=g.protocol_type or "consumer",
                         group_state=g.state) for g in listed if (not states or g.state in states) and (
                       everything or access.allowed(broker, "Describe", access.GROUP, g.group_id, quiet=True)))
    return build(cls, throttle_time=0, error_code=0, groups=groups)
