"""``logbus configs`` for client quotas, kafka-configs' shape through a broker (``--bootstrap-server``;
AlterClientQuotas / DescribeClientQuotas sent with kafka-python, whose admin has no call for them):

    logbus configs --bootstrap-server B --alter --add-config producer_byte_rate=1048576 \\
        --entity-type users --entity-name alice --entity-type clients --entity-name app
    logbus configs --bootstrap-server B --alter --delete-config producer_byte_rate --entity-type clients --entity-default
    logbus configs --bootstrap-server B --describe --entity-type clients

Entity types pair with ``--entity-name`` / ``--entity-default`` in order (a type left without one, in a describe:
every name of it). Describe prints Kafka's lines (``Quota configs for client-id 'app' are producer_byte_rate=...``).
"""

from __future__ import annotations

import sys

from broker.client_quotas import entities

TYPES = {"users": entities.USER, "clients": entities.CLIENT_ID, "ips": entities.IP}
_WORDS = {entities.USER: "user-principal", entities.CLIENT_ID: "client-id", entities.IP: "ip"}
QUOTA_KEYS = set(entities.USER_CLIENT_KEYS) | set(entities.IP_KEYS)


class QuotaUsageError(ValueError):
    pass


def is_quota_change(add_config: str | None, delete_config: str | None, types: list[str]) -> bool:
    """Whether ``logbus configs`` is about quotas (else: SCRAM credentials of a user)."""
    keys = [item.split("=", 1)[0].strip() for item in (add_config or "").split(",") if item.strip()]
    keys += [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    return any(k in QUOTA_KEYS for k in keys) or any(t != "users" for t in types)


def parse_add(text: str | None) -> dict[str, float]:
    out = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise QuotaUsageError(f"--add-config: expected KEY=VALUE, got {item!r}")
        if key not in QUOTA_KEYS:
            raise QuotaUsageError(f"--add-config: {key} is not a quota config ({', '.join(sorted(QUOTA_KEYS))})")
        try:
            out[key] = float(value)
        except ValueError:
            raise QuotaUsageError(f"--add-config: {key}: {value!r} is not a number") from None
    return out


def components(types: list[str], names: list[str]) -> list[tuple[str, str | None | type]]:
    """[(entity type, name, or None for the default, or ``...`` for any name)]."""
    if len(names) > len(types):
        raise QuotaUsageError("More entity names specified than entity types")
    out = []
    for i, kind in enumerate(types):
        if kind not in TYPES:
            raise QuotaUsageError(f"quotas are set on --entity-type users, clients or ips, not {kind}")
        name = names[i] if i < len(names) else ...
        out.append((TYPES[kind], None if name == "" else name))
    return out


def describe_line(parts: list[tuple[str, str | None]], values: dict[str, float]) -> str:
    order = {entities.USER: 0, entities.CLIENT_ID: 1, entities.IP: 2}
    who = ", ".join(f"{_WORDS[k]} '{n}'" if n is not None else f"the default {_WORDS[k]}"
                    for k, n in sorted(parts, key=lambda p: order[p[0]]))
    return f"Quota configs for {who} are {', '.join(f'{k}={v}' for k, v in sorted(values.items()))}"


def _send(admin, request):
    async def call():
        return await admin._manager.send(request)  # noqa: SLF001 - kafka-python's admin has no quota calls

    return admin._manager.run(call)  # noqa: SLF001


def run(args, types: list[str], names: list[str]) -> int:
    from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

    from logbus.admin import AdminError, kafka_python_admin

    try:
        if not args.bootstrap_server:
            raise QuotaUsageError("quotas are altered and described through a broker: give --bootstrap-server")
        wanted = components(types, names)
        alter = bool(args.alter)
        if alter:
            if any(name is ... for _, name in wanted):
                raise QuotaUsageError("--alter needs an --entity-name or --entity-default for every --entity-type")
            add = parse_add(args.add_config)
            delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
            if not add and not delete:
                raise QuotaUsageError("--alter needs --add-config or --delete-config")
        elif not args.describe:
            raise QuotaUsageError("--alter or --describe")
    except QuotaUsageError as exc:
        print(f"logbus: configs: {exc}", file=sys.stderr)
        return 2
    admin = None
    try:
        admin = kafka_python_admin(args.bootstrap_server, args.command_config)
        if alter:
            entry = AlterClientQuotasRequest.EntryData
            request = AlterClientQuotasRequest(entries=[entry(
                entity=[entry.EntityData(entity_type=k, entity_name=n) for k, n in wanted],
                ops=[entry.OpData(key=k, value=v, remove=False) for k, v in add.items()]
                + [entry.OpData(key=k, value=0.0, remove=True) for k in delete])], validate_only=False)
            response = _send(admin, request)
            for result in response.entries:
                if result.error_code:
                    print(f"logbus: configs: {result.error_message or f'error {result.error_code}'}", file=sys.stderr)
                    return 1
            kind, name = types[0], names[0]
            print(f"Completed updating config for {kind[:-1]} {name}." if name
                  else f"Completed updating default config for {kind} in the cluster.")
            return 0
        component = DescribeClientQuotasRequest.ComponentData
        request = DescribeClientQuotasRequest(components=[
            component(entity_type=k, match_type=entities.SPECIFIED if n is ... else
                      entities.DEFAULT_MATCH if n is None else entities.EXACT, match=None if n in (None, ...) else n)
            for k, n in wanted], strict=True)
        response = _send(admin, request)
        if response.error_code:
            print(f"logbus: configs: {response.error_message or f'error {response.error_code}'}", file=sys.stderr)
            return 1
        for entry in response.entries or ():
            print(describe_line([(e.entity_type, e.entity_name) for e in entry.entity],
                                {v.key: v.value for v in entry.values}))
        return 0
    except AdminError as exc:
        print(f"logbus: configs: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a broker unreachable, a refused request: one line
        print(f"logbus: configs: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if admin is not None:
            admin.close()
