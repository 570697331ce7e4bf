"""AlterUserScramCredentials (key 51), v0: upsert (salt + salted password from the client, as Kafka) or delete
users' SCRAM credentials, stored in Kafka's form (ZooKeeper ``/config/users/<user>``; standalone: the
credentials file). No authorization yet (issue 18, item 2): like Kafka without an authorizer, anyone may call it."""

from collections import defaultdict

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access
from broker.security import credentials, scram

KEY = 51
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


@handles(KEY, "AlterUserScramCredentials", 0, 0)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "AlterUserScramCredentialsResult")
    errors: dict[str, tuple[ErrorCode, str]] = {}
    if not access.on_cluster(broker, "Alter"):
        users = sorted({i.name for i in [*request.deletions, *request.upsertions]})
        return build(cls, throttle_time=0, results=tuple(
            build(result_cls, user=u, error_code=ErrorCode.cluster_authorization_failed,
                  error_message="Authorization failed.") for u in users))
    adds: dict[str, dict] = defaultdict(dict)
    deletes: dict[str, list] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for item in [*request.deletions, *request.upsertions]:
        user, mech = item.name, int(item.mechanism)
        if (user, mech) in seen:
            errors[user] = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same "
                                                          "request")
        seen.add((user, mech))
        try:
            credentials.user_path(user)
        except ValueError:
            errors.setdefault(user, (ErrorCode.unacceptable_credential, "Username must not be empty or a path"))
        if mech not in MECHANISMS:
            errors.setdefault(user, (ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {mech}"))
    for item in request.deletions:
        if item.name not in errors:
            deletes[item.name].append(MECHANISMS[int(item.mechanism)])
    for item in request.upsertions:
        if item.name in errors:
            continue
        iterations = int(item.iterations)
        if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS:
            errors[item.name] = (ErrorCode.unacceptable_credential,
                                 f"Iterations must be within {scram.MIN_ITERATIONS}..{scram.MAX_ITERATIONS}")
            continue
        mechanism = MECHANISMS[int(item.mechanism)]
        adds[item.name][mechanism] = scram.credential_from_salted(mechanism, bytes(item.salted_password),
                                                                  bytes(item.salt), iterations)
    users = sorted({i.name for i in [*request.deletions, *request.upsertions]})
    nodes = await credentials.read_nodes(broker, [u for u in users if u not in errors])
    results = []
    for user in users:
        if user not in errors:
            node = nodes.get(user)
            current = credentials.credential_from_node
            missing = [m for m in deletes.get(user, []) if current(node, m) is None]
            if missing:
                errors[user] = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not "
                                                              "exist")
            else:
                await credentials.write_node(broker, user,
                                             credentials.updated_node(node, adds.get(user, {}), deletes.get(user, [])))
        error, message = errors.get(user, (ErrorCode.none, None))
        results.append(build(result_cls, user=user, error_code=error, error_message=message))
    return build(cls, throttle_time=0, results=tuple(results))
