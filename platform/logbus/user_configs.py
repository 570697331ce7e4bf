"""``logbus configs --entity-type users``: SCRAM credentials, the kafka-configs shape. Written to ZooKeeper as
Kafka keeps them (``/config/users/<user>`` and a ``/config/changes/config_change_`` notification), or, for a
standalone broker, to ``<log dir>/scram-credentials.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from broker.security import credentials, scram


class UsageError(ValueError):
    pass


def parse_add_config(text: str) -> dict[str, dict[str, str]]:
    """``SCRAM-SHA-512=[password=x],SCRAM-SHA-256=[iterations=8192,password=y]`` → {mechanism: {k: v}}."""
    out: dict[str, dict[str, str]] = {}
    pos = 0
    while pos < len(text):
        eq = text.find("=", pos)
        if eq < 0:
            raise UsageError(f"--add-config: expected KEY=VALUE at {text[pos:]!r}")
        key = text[pos:eq].strip().upper()
        if text[eq + 1:eq + 2] == "[":
            end = text.find("]", eq)
            if end < 0:
                raise UsageError("--add-config: missing ]")
            inner, pos = text[eq + 2:end], end + 1
        else:
            end = text.find(",", eq)
            end = len(text) if end < 0 else end
            inner, pos = text[eq + 1:end], end
        if key not in scram.HASHES:
            raise UsageError(f"--add-config: {key} is not a SCRAM mechanism ({', '.join(scram.HASHES)})")
        values = {}
        for item in inner.split(","):
            k, sep, v = item.partition("=")
            if not sep:
                raise UsageError(f"--add-config: {key}: expected password=...[,iterations=N]")
            values[k.strip()] = v
        if "password" not in values:
            raise UsageError(f"--add-config: {key} needs password=...")
        out[key] = values
        if pos < len(text) and text[pos] == ",":
            pos += 1
    return out


def credentials_to_add(text: str | None) -> dict[str, scram.ScramCredential]:
    out = {}
    for mechanism, values in parse_add_config(text or "").items():
        try:
            iterations = int(values.get("iterations", scram.MIN_ITERATIONS))
            out[mechanism] = scram.make_credential(mechanism, values["password"], iterations)
        except (ValueError, scram.ScramError) as exc:
            raise UsageError(f"--add-config: {mechanism}: {exc}") from None
    return out


def describe_line(user: str, node: bytes | None) -> str:
    config = json.loads(node).get("config", {}) if node else {}
    mechs = [f"{m}=iterations={scram.ScramCredential.decode(v).iterations}" for m, v in sorted(config.items())
             if m in scram.HASHES]
    return f"SCRAM credential configs for user-principal '{user}' are {', '.join(mechs)}"


def _zookeeper(connect: str, user: str, add, delete: list[str], alter: bool) -> bytes | None:
    from kazoo.client import KazooClient
    from kazoo.exceptions import NodeExistsError

    from broker.cluster.zk import split_chroot

    hosts, chroot = split_chroot(connect)
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    try:
        path = chroot + credentials.user_path(user)
        data = client.get(path)[0] if client.exists(path) else None
        if not alter:
            return data
        node = credentials.updated_node(data, add, delete)
        if data is None:
            client.ensure_path(chroot + credentials.USERS_PATH)
            try:
                client.create(path, node)
            except NodeExistsError:
                client.set(path, node)
        else:
            client.set(path, node)
        client.ensure_path(chroot + credentials.CHANGES_PATH)
        client.create(chroot + credentials.CHANGES_PATH + "/config_change_",
                      json.dumps({"version": 2, "entity_path": f"users/{user}"}).encode(), sequence=True)
        return node
    finally:
        client.stop()
        client.close()


def _file(log_dir: str, user: str, add, delete: list[str], alter: bool) -> bytes | None:
    file = Path(log_dir) / credentials.STANDALONE_FILE
    users = json.loads(file.read_text()) if file.exists() else {}
    data = json.dumps(users[user]).encode() if user in users else None
    if not alter:
        return data
    node = credentials.updated_node(data, add, delete)
    users[user] = json.loads(node)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(users, indent=1))
    tmp.chmod(0o600)
    tmp.replace(file)
    return node


def client_config(bootstrap: str, command_config: str | None) -> dict:
    """confluent-kafka settings from ``--bootstrap-server`` and a Kafka client properties file
    (``--command-config``): Kafka's Java security keys are translated (settings.security); other keys are
    passed to librdkafka as they are."""
    from settings.properties import read_properties
    from settings.security import librdkafka_config

    props = read_properties(command_config) if command_config else {}
    return {**librdkafka_config(props), "bootstrap.servers": bootstrap}


def _through_broker(args, add, delete: list[str], alter: bool) -> int:
    """AlterUserScramCredentials / DescribeUserScramCredentials through a broker (confluent-kafka's admin)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion, UserScramCredentialUpsertion)

    admin = AdminClient(client_config(args.bootstrap_server, args.command_config))
    user = args.entity_name
    try:
        if alter:
            mechanisms = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
            changes = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanisms[m], values["iterations"]),
                                                    values["password"].encode())
                       for m, values in add.items()]
            changes += [UserScramCredentialDeletion(user, mechanisms[m]) for m in delete if m in mechanisms]
            admin.alter_user_scram_credentials(changes)[user].result(30)
            print(f"Completed updating config for user {user}.")
        else:
            try:
                described = admin.describe_user_scram_credentials([user])[user].result(30)
            except KafkaException as exc:  # kafka-configs' line (a user with quotas only, say), and a describe's 0
                print(f"Error retrieving SCRAM credential configs for user-principal '{user}': "
                      f"{exc.args[0].name()}: {exc.args[0].str()}")
                return 0
            mechs = [f"{str(c.mechanism.name).replace('_', '-')}=iterations={c.iterations}"
                     for c in described.scram_credential_infos]
            print(f"SCRAM credential configs for user-principal '{user}' are {', '.join(mechs)}")
    except KafkaException as exc:
        print(f"logbus: configs: {exc.args[0].str() if exc.args else exc}", file=sys.stderr)
        return 1
    return 0


def run(args) -> int:
    try:
        if args.entity_type != "users":
            raise UsageError("only --entity-type users is implemented (SCRAM credentials)")
        if not args.entity_name:
            raise UsageError("--entity-name is needed")
        if sum(map(bool, (args.zookeeper, args.log_dir, args.bootstrap_server))) != 1:
            raise UsageError("give one of --bootstrap-server HOST:PORT, --zookeeper HOST:PORT/chroot (works before "
                             "any broker runs) or --log-dir DIR (a standalone broker's first log dir)")
        alter = bool(args.alter)
        if not alter and not args.describe:
            raise UsageError("--alter or --describe")
        if args.bootstrap_server:
            raw = parse_add_config(args.add_config or "") if alter else {}
            for values in raw.values():
                values["iterations"] = int(values.get("iterations", scram.MIN_ITERATIONS))
        add = credentials_to_add(args.add_config) if alter else {}
        delete = [m.strip().upper() for m in (args.delete_config or "").split(",") if m.strip()] if alter else []
        if alter and not add and not delete:
            raise UsageError("--alter needs --add-config or --delete-config")
        credentials.user_path(args.entity_name)
    except (UsageError, ValueError) as exc:
        print(f"logbus: configs: {exc}", file=sys.stderr)
        return 2
    if args.bootstrap_server:
        return _through_broker(args, raw, delete, alter)
    store = _zookeeper if args.zookeeper else _file
    node = store(args.zookeeper or args.log_dir, args.entity_name, add, delete, alter)
    if alter:
        print(f"Completed updating config for user {args.entity_name}.")
    else:
        print(describe_line(args.entity_name, node))
    return 0
