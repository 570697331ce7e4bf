"""Quota entities as Kafka names and stores them, and what DescribeClientQuotas and AlterClientQuotas check.
No I/O.

An entity is one of: a user, a user's client id, a client id (each name may be the default, ``None`` in the
protocol, ``<default>`` in ZooKeeper), or an IP address. Its configs live at the ZooKeeper path Kafka uses under
``/config``: ``users/<user>``, ``users/<user>/clients/<client-id>``, ``clients/<client-id>``, ``ips/<ip>``, with
names sanitized as Kafka's ``Sanitizer`` does (URL-encoding; ``*`` as ``%2A``). Here an entity is that path.

Validation follows Kafka's controller (``ClientQuotaControlManager``): an unknown key, a value ≤ 0, a fraction
for an integral key, an IP entity beside a user or client id, an empty name, an entity or a key given twice are
INVALID_REQUEST with Kafka's messages. Describe filters follow the ZooKeeper-mode broker (``ZkAdminManager``):
EXACT and DEFAULT select that name, SPECIFIED any name of that type (the default included), a type left out of a
strict filter must be absent from the entity.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import quote, unquote

USER, CLIENT_ID, IP = "user", "client-id", "ip"
DEFAULT = "<default>"  # ZooKeeper's name of a default entity (ZooKeeperInternals.DEFAULT_STRING)
_ROOTS = {USER: "users", CLIENT_ID: "clients", IP: "ips"}
_TYPES = {root: kind for kind, root in _ROOTS.items()}

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# key -> type, as Kafka's QuotaConfig defines them
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG", REQUEST_PERCENTAGE: "DOUBLE",
                    CONTROLLER_MUTATION_RATE: "DOUBLE"}
IP_KEYS = {CONNECTION_CREATION_RATE: "INT"}
BYTE_RATES = frozenset((PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE))
ENFORCED = BYTE_RATES | {CONTROLLER_MUTATION_RATE, REQUEST_PERCENTAGE, CONNECTION_CREATION_RATE}
_MAX = {"INT": 2**31 - 1, "LONG": 2**63 - 1}

EXACT, DEFAULT_MATCH, SPECIFIED = 0, 1, 2  # DescribeClientQuotas match types


class QuotaError(ValueError):
    """A request Kafka refuses; ``error`` is the ErrorCode name."""

    def __init__(self, error: str, message: str):
        super().__init__(message)
        self.error = error


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encoding as Java's URLEncoder, then ``+`` → ``%20``, ``*`` → ``%2A``."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return unquote(name)


def _node_name(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


def _entity_name(node: str) -> str | None:
    return None if node == DEFAULT else desanitize(node)


def entity_path(components) -> str:
    """The ZooKeeper path (under ``/config``) of an entity given as ``[(entity type, name or None)]``; raises
    :class:`QuotaError` for what Kafka refuses."""
    if not components:
        raise QuotaError("invalid_request", "Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for kind, name in components:
        if kind in names:
            raise QuotaError("invalid_request", f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in _ROOTS:
            raise QuotaError("invalid_request", f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise QuotaError("invalid_request", f"Empty {kind} not supported")
        names[kind] = name
    if IP in names:
        if len(names) > 1:
            raise QuotaError("invalid_request", "Invalid quota entity combination, IP entity should not be used "
                                                "with user/client ID entity.")
        ip = names[IP]
        if ip is not None:
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise QuotaError("invalid_request", f"{ip} is not a valid IP or resolvable host.") from None
        return f"ips/{_node_name(ip)}"
    if USER in names and CLIENT_ID in names:
        return f"users/{_node_name(names[USER])}/clients/{_node_name(names[CLIENT_ID])}"
    if USER in names:
        return f"users/{_node_name(names[USER])}"
    return f"clients/{_node_name(names[CLIENT_ID])}"


def entity_components(path: str) -> list[tuple[str, str | None]]:
    """:func:`entity_path` reversed."""
    parts = path.split("/")
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return [(USER, _entity_name(parts[1])), (CLIENT_ID, _entity_name(parts[3]))]
    if len(parts) == 2 and parts[0] in _TYPES:
        return [(_TYPES[parts[0]], _entity_name(parts[1]))]
    raise ValueError(f"not a quota entity path: {path}")


def valid_keys(path: str) -> dict[str, str]:
    return IP_KEYS if path.startswith("ips/") else USER_CLIENT_KEYS


def quota_values(path: str, config: dict) -> dict[str, float]:
    """The quota configs of an entity's stored config (a user's node also holds its SCRAM credentials); a value
    that is not a positive number (written by hand) is left out: no quota rather than a broken one."""
    keys = valid_keys(path)
    out = {}
    for key, value in config.items():
        if key in keys:
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            if number > 0 and number != float("inf"):
                out[key] = number
    return out


def altered(path: str, config: dict, ops) -> dict:
    """The entity's config after ``ops`` (``[(key, value, remove)]``), validated as Kafka's controller does."""
    keys = valid_keys(path)
    seen = set()
    out = dict(config)
    for key, value, remove in ops:
        if key in seen:
            raise QuotaError("invalid_request", f"Duplicate quota key {key} not updating quota for this entity")
        seen.add(key)
        if remove:
            out.pop(key, None)
            continue
        kind = keys.get(key)
        if kind is None:
            raise QuotaError("invalid_request", f"Invalid configuration key {key}")
        if not value > 0.0:
            raise QuotaError("invalid_request", f"Quota {key} must be greater than 0")
        if kind == "DOUBLE":
            out[key] = repr(float(value))
            continue
        if value > _MAX[kind]:
            raise QuotaError("invalid_request", f"Proposed value for {key} is too large for "
                                                f"{'an' if kind == 'INT' else 'a'} {kind}.")
        if abs(value % 1.0) > 1e-6:
            raise QuotaError("invalid_request", f"{key} cannot be a fractional value.")
        out[key] = str(int(value + 1e-6))
    return out


def check_filter(components) -> dict[str, tuple[int, str | None]]:
    """A DescribeClientQuotas filter ``[(entity type, match type, match)]`` as {type: (match type, match)}."""
    out: dict[str, tuple[int, str | None]] = {}
    for kind, match_type, match in components:
        if kind == "":
            raise QuotaError("invalid_request", "Unexpected empty filter component entity type")
        if kind not in _ROOTS:
            raise QuotaError("unsupported_version", f"Custom entity type '{kind}' not supported")
        if kind in out:
            name = "client" if kind == CLIENT_ID else kind
            raise QuotaError("invalid_request", f"Duplicate {name} filter component entity type")
        if match_type not in (EXACT, DEFAULT_MATCH, SPECIFIED):
            raise QuotaError("invalid_request", f"Unexpected match type: {match_type}")
        if match_type == EXACT and match is None:
            raise QuotaError("invalid_request", f"An exact {kind} filter component needs a name")
        out[kind] = (match_type, match)
    if IP in out and len(out) > 1:
        raise QuotaError("invalid_request", "Invalid entity filter component combination, IP filter component "
                                            "should not be used with user or clientId filter component.")
    return out


def matches(components: list[tuple[str, str | None]], wanted: dict[str, tuple[int, str | None]],
            strict: bool) -> bool:
    """Whether an entity passes a filter from :func:`check_filter`."""
    names = dict(components)
    for kind in _ROOTS:
        if kind in wanted:
            if kind not in names:
                return False
            match_type, match = wanted[kind]
            if match_type == EXACT and names[kind] != match:
                return False
            if match_type == DEFAULT_MATCH and names[kind] is not None:
                return False
        elif strict and kind in names:
            return False
    return True


def describe(entities: dict[str, dict], components, strict: bool) -> list[tuple[list, dict[str, float]]]:
    """Every stored entity with quotas that passes the filter: [(components, {key: value})]."""
    wanted = check_filter(components)
    out = []
    for path in sorted(entities):
        values = quota_values(path, entities[path])
        if not values:
            continue
        parts = entity_components(path)
        if matches(parts, wanted, strict):
            out.append((parts, values))
    return out
