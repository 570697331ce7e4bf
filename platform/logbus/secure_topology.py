"""The security of a topology with a ``security`` section (``topology/secure.json``): SASL_SSL on every broker
listener, an ACL authorizer, HTTPS and BASIC authentication on the registries and the audit service, and one
principal per service with only the ACLs it needs.

Nothing secret is in a config file: configs name files under the secrets directory through Kafka's
FileConfigProvider (``${file:<secrets>/<principal>.properties:password}``). Those files, the private CA and the
certificates are made by the ``security-init`` service (``logbus security-init PLAN``), which runs once before
the brokers — ``logbus up`` runs it in the foreground, compose as a one-shot container writing the ``secrets``
volume — and is idempotent: existing passwords, CA and certificates are kept. It then stores the SCRAM
credentials of every principal and the ACLs in each datacenter's ZooKeeper (how Kafka bootstraps a secure
cluster: ``kafka-configs --zookeeper`` and ``kafka-acls --authorizer-properties zookeeper.connect=...``).

Principals: ``broker`` (inter-broker, a super user), ``admin`` (operators, a super user; its password in
``<secrets>/admin.properties``), ``registry`` (the primary registry: ``_schemas``), ``registry-<dc>`` (a read-only
registry: reads ``_schemas``), ``mirror-<dc>`` (reads every topic of its sources, writes its own datacenter),
``counter-<dc>`` (reads its cluster, writes ``_audit``), ``frontend`` (writes the demo topics), ``audit`` (reads
``_audit``) and ``loads`` (reads its cluster and ``_audit``).
"""

from __future__ import annotations

import json
import secrets as random_secrets
import sys
from pathlib import Path

MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
FILE_PROVIDER = {"config.providers": "file",
                 "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider"}
DEMO_TOPICS = ("page-views", "clicks")
AUDIT_TOPIC = "_audit"
REGISTRY_WRITERS = ("frontend", "counter")  # principals (or prefixes) that register schemas


def enabled(topo: dict) -> dict | None:
    """The topology's ``security`` section (None: everything PLAINTEXT and open, as the default topology)."""
    sec = topo.get("security")
    if not sec:
        return None
    protocol = sec.get("protocol", "SASL_SSL")
    if protocol != "SASL_SSL":
        raise ValueError(f"security.protocol: secure topologies use SASL_SSL, not {protocol}")
    return sec


def password_ref(secrets_dir: str, principal: str) -> str:
    return f"${{file:{secrets_dir}/{principal}.properties:password}}"


def jaas(secrets_dir: str, principal: str) -> str:
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{principal}" '
            f'password="{password_ref(secrets_dir, principal)}";')


def client_props(secrets_dir: str, principal: str, prefix: str = "") -> dict:
    """A Kafka client's settings for ``principal`` (Kafka's Java names; settings.security translates them)."""
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.jaas.config": jaas(secrets_dir, principal),
             "ssl.truststore.type": "PEM", "ssl.truststore.location": f"{secrets_dir}/ca.pem"}
    return {**FILE_PROVIDER, **{prefix + k: v for k, v in props.items()}}


def registry_client_props(secrets_dir: str, principal: str) -> dict:
    """Confluent serializer settings of a registry client authenticating as ``principal``."""
    return {**FILE_PROVIDER, "schema.registry.basic.auth.user.info": f"{principal}:{password_ref(secrets_dir, principal)}",
            "schema.registry.basic.auth.credentials.source": "USER_INFO",
            "schema.registry.ssl.ca.location": f"{secrets_dir}/ca.pem"}


def broker_props(secrets_dir: str, cert: str, listeners: list[str], inter_broker: str,
                 authorizer: bool = True) -> dict:
    """A broker's security settings: every listener SASL_SSL with SCRAM, the ACL authorizer (``authorizer``)."""
    return {**FILE_PROVIDER,
            "listener.security.protocol.map": ",".join(f"{name}:SASL_SSL" for name in listeners),
            "inter.broker.listener.name": inter_broker,
            "sasl.enabled.mechanisms": MECHANISM, "sasl.mechanism.inter.broker.protocol": MECHANISM,
            **{f"listener.name.{name.lower()}.{MECHANISM.lower()}.sasl.jaas.config": jaas(secrets_dir, "broker")
               for name in listeners},
            "ssl.keystore.type": "PEM", "ssl.keystore.location": f"{secrets_dir}/{cert}.pem",
            "ssl.truststore.type": "PEM", "ssl.truststore.location": f"{secrets_dir}/ca.pem",
            **({"authorizer.class.name": AUTHORIZER, "super.users": "User:broker;User:admin",
                "allow.everyone.if.no.acl.found": "false"} if authorizer else {})}


def acl_plan(topo: dict) -> dict[str, list[dict]]:
    """Per datacenter: the ACLs its ZooKeeper gets, as {principal, operations, resource, name, pattern}."""
    dcs = topo["datacenters"]
    primary = next((dc for dc, spec in dcs.items() if spec.get("registry") == "primary"), None)
    plan: dict[str, list[dict]] = {dc: [] for dc in dcs}

    def allow(dc, principal, operations, resource, name, pattern="literal"):
        plan[dc].append({"principal": f"User:{principal}", "operations": list(operations), "resource": resource,
                         "name": name, "pattern": pattern})

    for dc, spec in dcs.items():
        if any(s.get("prometheus") for s in dcs.values()):  # the lag exporter: describes groups and topics
            allow(dc, "monitor", ("Describe",), "cluster", "kafka-cluster")
            allow(dc, "monitor", ("Describe",), "group", "*")
            allow(dc, "monitor", ("Describe",), "topic", "*")
        if spec.get("registry") == "primary":
            allow(dc, "registry", ("All",), "topic", "_schemas")
            allow(dc, "registry", ("Read", "Describe"), "group", "schema-registry", "prefixed")
            allow(dc, "registry", ("IdempotentWrite",), "cluster", "kafka-cluster")
            allow(dc, "registry", ("Write", "Describe"), "transactional_id", "schema-registry-leader")
        elif spec.get("registry"):
            allow(primary, f"registry-{dc}", ("Read", "Describe"), "topic", "_schemas")
            allow(primary, f"registry-{dc}", ("Read", "Describe"), "group", "schema-registry", "prefixed")
        if int(spec.get("frontends", 0)):
            for topic in (*DEMO_TOPICS, AUDIT_TOPIC):
                allow(dc, "frontend", ("Write", "Describe", "Create"), "topic", topic)
            allow(dc, "frontend", ("IdempotentWrite",), "cluster", "kafka-cluster")
        if spec.get("counter"):
            allow(dc, f"counter-{dc}", ("Read", "Describe"), "topic", "*")
            allow(dc, f"counter-{dc}", ("Write", "Create"), "topic", AUDIT_TOPIC)
            allow(dc, f"counter-{dc}", ("Read", "Describe"), "group", "logbus-audit-", "prefixed")
            allow(dc, f"counter-{dc}", ("IdempotentWrite",), "cluster", "kafka-cluster")
        for source in spec.get("mirror_from", []):
            who = f"mirror-{dc}"
            allow(source, who, ("Read", "Describe", "DescribeConfigs"), "topic", "*")
            allow(source, who, ("Read", "Describe"), "group", f"mirror-{dc}")
            allow(dc, who, ("Create", "Write", "Describe", "DescribeConfigs", "Read"), "topic", "*")
            allow(dc, who, ("Read", "Describe"), "group", f"mirror-{dc}")
            allow(dc, who, ("Write", "Describe"), "transactional_id", "logbus-mirror.", "prefixed")
            allow(dc, who, ("IdempotentWrite",), "cluster", "kafka-cluster")
        if spec.get("audit_service"):
            for c, cspec in dcs.items():
                if cspec.get("counter"):
                    allow(c, "audit", ("Read", "Describe"), "topic", AUDIT_TOPIC)
                    allow(c, "audit", ("Read", "Describe"), "group", "logbus-audit-service-", "prefixed")
        if spec.get("airflow"):
            allow(dc, "loads", ("Read", "Describe"), "topic", "*")
            allow(dc, "loads", ("Read", "Describe"), "group", "logbus-spark", "prefixed")
            for c, cspec in dcs.items():
                if cspec.get("counter"):
                    allow(c, "loads", ("Read", "Describe"), "topic", AUDIT_TOPIC)
                    allow(c, "loads", ("Read", "Describe"), "group", "logbus-audit-batch-", "prefixed")
    return plan


def principals(plan: dict[str, list[dict]]) -> list[str]:
    """Every principal of the plan, plus the two super users."""
    names = {"broker", "admin"} | {a["principal"].split(":", 1)[1] for acls in plan.values() for a in acls}
    return sorted(names)


def registry_users(plan: dict[str, list[dict]]) -> dict[str, str]:
    """Registry users and their roles: writers register schemas, the others read; ``admin`` administers."""
    out = {"admin": "admin"}
    for name in principals(plan):
        if name in ("broker", "admin") or name.startswith("registry"):
            continue
        out[name] = "write" if name.startswith(REGISTRY_WRITERS) else "read"
    return out


# ---- the security-init service -----------------------------------------------------------------------------------
def ensure_passwords(secrets_dir: Path, names: list[str]) -> dict[str, str]:
    """``<secrets>/<principal>.properties`` (``password=...``, mode 0600) for every principal; existing ones kept."""
    secrets_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in names:
        path = secrets_dir / f"{name}.properties"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(f"password={random_secrets.token_urlsafe(18)}\n")
            tmp.chmod(0o600)
            tmp.replace(path)
        out[name] = path.read_text().split("=", 1)[1].strip()
    return out


def run_init(plan_path: str) -> int:
    """``logbus security-init PLAN``: certificates, passwords, SCRAM credentials and ACLs (idempotent)."""
    from logbus.cli import main as logbus

    plan = json.loads(Path(plan_path).read_text())
    secrets_dir = Path(plan["secrets_dir"])
    passwords = ensure_passwords(secrets_dir, plan["principals"])
    certs = ["certs", "--dir", str(secrets_dir)]
    for name, hosts in plan["certificates"].items():
        certs += ["--service", f"{name}:{','.join(hosts)}"]
    if logbus(certs) != 0:
        return 1
    for dc, zk in plan["zookeepers"].items():
        for name in plan["principals"]:
            code = logbus(["configs", "--zookeeper", zk, "--alter", "--entity-type", "users", "--entity-name", name,
                           "--add-config", f"{MECHANISM}=[password={passwords[name]}]"])
            if code != 0:
                print(f"logbus: security-init: SCRAM credentials of {name} in {dc} not stored", file=sys.stderr)
                return 1
        for acl in plan["acls"].get(dc, []):  # stored also while the brokers run without an authorizer
            argv = ["acls", "--authorizer-properties", f"zookeeper.connect={zk}", "--add", "--force",
                    "--allow-principal", acl["principal"], "--resource-pattern-type", acl["pattern"]]
            for op in acl["operations"]:
                argv += ["--operation", op]
            argv += ["--cluster"] if acl["resource"] == "cluster" else [f"--{acl['resource'].replace('_', '-')}",
                                                                        acl["name"]]
            if logbus(argv) != 0:
                print(f"logbus: security-init: ACL {acl} in {dc} not stored", file=sys.stderr)
                return 1
    users = plan.get("registry_users", {})
    if users:
        write_registry_passwords(secrets_dir, users, passwords)
    (secrets_dir / "initialized").write_text("ok\n")
    print(f"logbus security-init: {len(plan['principals'])} principals, "
          f"{sum(len(a) for a in plan['acls'].values())} ACLs, secrets in {secrets_dir}")
    return 0


def write_registry_passwords(secrets_dir: Path, users: dict[str, str], passwords: dict[str, str]) -> None:
    """The registries' and the audit service's BASIC users (Jetty's PropertyFileLoginModule format)."""
    path = secrets_dir / "http-users.properties"
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{name}: {passwords[name]},{role}\n" for name, role in sorted(users.items())
                           if name in passwords))
    tmp.chmod(0o600)
    tmp.replace(path)


# ---- servers' settings (the registries' and the audit service's HTTPS and BASIC authentication) -------------------
def registry_server_props(secrets_dir: str, cert: str) -> dict:
    """A registry's HTTPS key store and BASIC authentication (Confluent's keys)."""
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": f"{secrets_dir}/{cert}.pem",
            "authentication.method": "BASIC", "authentication.realm": "SchemaRegistry",
            "authentication.roles": "admin,write,read",
            "authentication.roles.write": "write", "authentication.roles.admin": "admin",
            "authentication.users.file": f"{secrets_dir}/http-users.properties"}


def audit_server_props(secrets_dir: str, cert: str) -> dict:
    """The audit service's HTTPS key store and BASIC authentication."""
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": f"{secrets_dir}/{cert}.pem",
            "authentication.method": "BASIC", "authentication.users.file": f"{secrets_dir}/http-users.properties"}
