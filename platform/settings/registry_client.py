"""A schema-registry client's settings, in the names Confluent's serializers take: ``schema.registry.url``,
``schema.registry.basic.auth.user.info`` (``user:password``; ``basic.auth.credentials.source=USER_INFO``),
``schema.registry.ssl.ca.location`` (and ``.ssl.certificate.location`` / ``.ssl.key.location`` for a client
certificate). :func:`registry_conf` renders them for confluent-kafka's SchemaRegistryClient; :func:`split`
takes them out of a Kafka client's properties, which librdkafka would refuse."""

from __future__ import annotations

PREFIX = "schema.registry."
CLIENT_KEYS = {  # property (after the prefix) -> SchemaRegistryClient key (basic.auth.credentials.source=USER_INFO
    "url": "url",  # is accepted in properties and implied: this confluent-kafka's client refuses the key)
    "basic.auth.user.info": "basic.auth.user.info",
    "ssl.ca.location": "ssl.ca.location",
    "ssl.certificate.location": "ssl.certificate.location",
    "ssl.key.location": "ssl.key.location",
}


def split(props: dict) -> tuple[dict, dict]:
    """(the ``schema.registry.*`` and ``basic.auth.*`` settings, every other setting)."""
    mine = {k: v for k, v in props.items() if k.startswith(PREFIX) or k.startswith("basic.auth.")}
    return mine, {k: v for k, v in props.items() if k not in mine}


def registry_conf(props: dict, url: str | None = None) -> dict:
    """SchemaRegistryClient settings from ``props`` (``url`` wins over ``schema.registry.url``)."""
    conf = {"url": url or props.get(PREFIX + "url")}
    for key, client_key in CLIENT_KEYS.items():
        value = props.get(PREFIX + key, props.get(key) if key.startswith("basic.auth.") else None)
        if key != "url" and value:
            conf[client_key] = value
    source = props.get(PREFIX + "basic.auth.credentials.source", props.get("basic.auth.credentials.source"))
    if source and source.strip().upper() not in ("USER_INFO", "URL"):
        raise ValueError(f"basic.auth.credentials.source={source}: logbus clients take USER_INFO or URL")
    return conf


def client(registry):
    """A SchemaRegistryClient for a URL or a :func:`registry_conf` dict."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(dict(registry) if isinstance(registry, dict) else {"url": registry})
