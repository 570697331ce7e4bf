"""DescribeCluster (key 60), v0–2: the cluster id, the controller and the live brokers, and with
``include_cluster_authorized_operations`` the principal's operations on the cluster (0 for one that may not Describe
it), as Kafka's brokers answer. Only the brokers endpoint type exists here (v1+): asking a broker for the
controllers' endpoints is MISMATCHED_ENDPOINT_TYPE, any other type UNSUPPORTED_ENDPOINT_TYPE, as Kafka's brokers
answer; no broker is ever fenced."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 60
BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2


@handles(KEY, "DescribeCluster", 0, 2)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    broker_cls = nested(cls, "DescribeClusterBroker")
    endpoint = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint != BROKERS_ENDPOINT:  # the other fields keep the schema's defaults, as in Kafka
        error, message = ((ErrorCode.mismatched_endpoint_type, "The request was sent to an endpoint of type BROKER, "
                           "but we wanted an endpoint of type CONTROLLER") if endpoint == CONTROLLERS_ENDPOINT else
                          (ErrorCode.unsupported_endpoint_type, f"Unsupported endpoint type {endpoint}"))
        return build(cls, throttle_time=0, error_code=error, error_message=message, endpoint_type=BROKERS_ENDPOINT,
                     cluster_id="", controller_id=-1, brokers=(), cluster_authorized_operations=access.NOT_REQUESTED)
    operations = access.NOT_REQUESTED
    if request.include_cluster_authorized_operations:
        operations = (access.authorized_operations(broker, access.CLUSTER)
                      if access.on_cluster(broker, "Describe", quiet=True) else 0)
    brokers = tuple(build(broker_cls, broker_id=node, host=host, port=port, rack=rack, is_fenced=False)
                    for node, host, port, rack in broker.live_brokers())
    return build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, endpoint_type=endpoint,
                 cluster_id=broker.cluster_id, controller_id=broker.controller_id, brokers=brokers,
                 cluster_authorized_operations=operations)
