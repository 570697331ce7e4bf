"""Confluent's data contracts on a schema: ``metadata`` (tags, properties, sensitive field names) and a ``ruleSet``
(migration, domain and encoding rules that the serializers run: CEL conditions, JSONata migrations, encryption).

The registry keeps them as Confluent's entities write them (``Metadata``, ``RuleSet``, ``Rule``: maps and sets
sorted, empty ones left out, a rule's kind TRANSFORM and mode WRITEREAD by default, ``disabled`` always written),
checks a rule set as ``RuleSet.validate()`` does (error 42210 with its messages), and hashes both into a schema's
GUID as ``Schema.updateHash`` does. A shape Jackson would not read (a property that is not a string, an unknown
kind or mode) is 422, as Confluent's body errors."""

from __future__ import annotations

KINDS = ("TRANSFORM", "CONDITION")
MODES = ("UPGRADE", "DOWNGRADE", "UPDOWN", "WRITE", "READ", "WRITEREAD")
MIGRATION_MODES, DOMAIN_MODES = ("UPGRADE", "DOWNGRADE", "UPDOWN"), ("WRITE", "READ", "WRITEREAD")
ENVIRONMENTS = ("ALL", "CLIENT", "GATEWAY", "SERVER", "NONE")
RULE_LISTS = ("migrationRules", "domainRules", "encodingRules")
NAME_MAX_LENGTH = 256
INVALID_RULESET = 42210


class ContractError(ValueError):
    """``code`` is 422 for a body Confluent could not read, 42210 for a rule set its validation refuses."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _strings(value, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ContractError(422, f"Unprocessable entity: {what} must be a list of strings")
    return sorted(set(value))


def _string_map(value, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ContractError(422, f"Unprocessable entity: {what} must map names to strings")
    return dict(sorted(value.items()))


def metadata(raw) -> dict | None:
    """A request's ``metadata`` as Confluent stores and serves it; None when absent or null."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ContractError(422, "Unprocessable entity: metadata must be an object")
    tags = raw.get("tags") or {}
    if not isinstance(tags, dict):
        raise ContractError(422, "Unprocessable entity: metadata.tags must map paths to lists of tags")
    return _non_empty({"tags": {path: _strings(names, "metadata.tags values") for path, names in sorted(tags.items())},
                       "properties": _string_map(raw.get("properties"), "metadata.properties"),
                       "sensitive": _strings(raw.get("sensitive"), "metadata.sensitive")})


def _non_empty(fields: dict) -> dict:
    """Jackson's NON_EMPTY: null, empty strings, lists and maps left out (False is written)."""
    return {k: v for k, v in fields.items() if v is not None and v != "" and v != [] and v != {}}


def _rule(raw) -> dict:
    if not isinstance(raw, dict):
        raise ContractError(422, "Unprocessable entity: a rule must be an object")
    kind, mode = raw.get("kind") or "TRANSFORM", raw.get("mode") or "WRITEREAD"
    if kind not in KINDS or mode not in MODES:
        raise ContractError(422, f"Unprocessable entity: unknown rule kind {kind!r} or mode {mode!r}")
    for key in ("name", "doc", "type", "expr", "onSuccess", "onFailure"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ContractError(422, f"Unprocessable entity: a rule's {key} must be a string")
    if not isinstance(raw.get("disabled", False), bool):
        raise ContractError(422, "Unprocessable entity: a rule's disabled must be true or false")
    out = _non_empty({"name": raw.get("name"), "doc": raw.get("doc"), "kind": kind, "mode": mode,
                      "type": raw.get("type"), "tags": _strings(raw.get("tags"), "a rule's tags"),
                      "params": _string_map(raw.get("params"), "a rule's params"), "expr": raw.get("expr"),
                      "onSuccess": raw.get("onSuccess"), "onFailure": raw.get("onFailure"),
                      "disabled": bool(raw.get("disabled", False))})
    # what validate() reads, kept aside: Jackson keeps an empty name or type, only the JSON leaves them out
    out["_raw"] = {"name": raw.get("name"), "type": raw.get("type")}
    return out


def rule_set(raw) -> dict | None:
    """A request's ``ruleSet`` as Confluent stores and serves it (None when absent or null), validated as
    ``RuleSet.validate()``: ContractError 42210 with Confluent's message for a rule it refuses."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ContractError(422, "Unprocessable entity: ruleSet must be an object")
    parsed: dict = {}
    for key in RULE_LISTS:  # read whole first, as Jackson does, then validated
        rules = raw.get(key) or []
        if not isinstance(rules, list):
            raise ContractError(422, f"Unprocessable entity: ruleSet.{key} must be a list")
        parsed[key] = [_rule(r) for r in rules]
    out: dict = {}
    names: set = set()
    for key, allowed, label in zip(RULE_LISTS, (MIGRATION_MODES, DOMAIN_MODES, DOMAIN_MODES),
                                   ("Migration", "Domain", "Encoding")):
        for rule in parsed[key]:
            name = rule["_raw"]["name"]
            if name in names:
                raise ContractError(INVALID_RULESET, f"Found rule with duplicate name '{name}'")
            names.add(name)
            _validate(rule)
            if rule["mode"] not in allowed:
                raise ContractError(INVALID_RULESET, f"{label} rules can only be {', '.join(allowed)}")
            del rule["_raw"]
        if parsed[key]:
            out[key] = parsed[key]
    enable_at = raw.get("enableAt")
    if enable_at is not None:
        if enable_at not in ENVIRONMENTS:
            raise ContractError(422, f"Unprocessable entity: unknown enableAt {enable_at!r}")
        out["enableAt"] = enable_at
    return out


def _validate(rule: dict) -> None:
    """Confluent's ``Rule.validate()``: its name, a type, and several actions only for WRITEREAD/UPDOWN."""
    name = rule["_raw"]["name"]
    if name is None:
        raise ContractError(INVALID_RULESET, "Missing rule name")
    if not name:
        raise ContractError(INVALID_RULESET, "Empty rule name")
    if len(name) > NAME_MAX_LENGTH:
        raise ContractError(INVALID_RULESET, "Rule name too long")
    if not (name[0].isalpha() or name[0] == "_"):
        raise ContractError(INVALID_RULESET, f"Illegal initial character in rule name: {name}")
    if not all(c.isalnum() or c in "_-" for c in name[1:]):
        raise ContractError(INVALID_RULESET, f"Illegal character in rule name: {name}")
    if rule["_raw"]["type"] is None:
        raise ContractError(INVALID_RULESET, "Missing rule type")
    if rule["mode"] not in ("WRITEREAD", "UPDOWN"):
        for action in (rule.get("onSuccess"), rule.get("onFailure")):
            if action is not None and "," in action:
                raise ContractError(INVALID_RULESET, "Multiple actions only valid with WRITEREAD and UPDOWN")


def update_hash(md5, meta: dict | None, rules: dict | None) -> None:
    """What ``Schema.updateHash`` adds after the text and references: a 1 byte and the metadata (tags by path,
    properties, sensitive names, all sorted), a 1 byte and the rules in order, then ``enableAt``."""
    if meta is not None:
        md5.update(b"\x01")
        for path, names in meta.get("tags", {}).items():
            md5.update(path.encode())
            for name in names:
                md5.update(name.encode())
        for key, value in meta.get("properties", {}).items():
            md5.update(key.encode() + value.encode())
        for name in meta.get("sensitive", []):
            md5.update(name.encode())
    if rules is not None:
        md5.update(b"\x01")
        for key in RULE_LISTS:
            for rule in rules.get(key, []):
                for field in ("name", "doc", "kind", "mode", "type"):
                    if rule.get(field) is not None:
                        md5.update(rule[field].encode())
                for tag in rule.get("tags", []):
                    md5.update(tag.encode())
                for k, v in rule.get("params", {}).items():
                    md5.update(k.encode() + v.encode())
                for field in ("expr", "onSuccess", "onFailure"):
                    if rule.get(field) is not None:
                        md5.update(rule[field].encode())
                if rule.get("disabled"):
                    md5.update(b"\x01")
        if rules.get("enableAt") is not None:
            md5.update(rules["enableAt"].encode())


def merge_metadata(old: dict | None, new: dict | None) -> dict | None:
    """Confluent's ``Metadata.mergeMetadata``: ``new``'s tags (by path) and properties over ``old``'s, the sensitive
    names of both; either alone when the other is absent."""
    if old is None or new is None:
        return new if old is None else old
    return _non_empty({"tags": dict(sorted({**old.get("tags", {}), **new.get("tags", {})}.items())),
                       "properties": dict(sorted({**old.get("properties", {}), **new.get("properties", {})}.items())),
                       "sensitive": sorted(set(old.get("sensitive", [])) | set(new.get("sensitive", [])))})


def merge_rule_sets(old: dict | None, new: dict | None) -> dict | None:
    """Confluent's ``RuleSet.mergeRuleSets``: per list, ``old``'s rules not named in ``new``'s, then ``new``'s;
    ``new``'s ``enableAt`` if it has one."""
    if old is None or new is None:
        return new if old is None else old
    out: dict = {}
    for key in RULE_LISTS:
        before, after = old.get(key) or [], new.get(key) or []
        names = {r.get("name") for r in after}
        merged = [r for r in before if r.get("name") not in names] + after if before and after else after or before
        if merged:
            out[key] = merged
    enable_at = new.get("enableAt") or old.get("enableAt")
    if enable_at is not None:
        out["enableAt"] = enable_at
    return out


def with_config(config: dict, meta: dict | None, rules: dict | None) -> tuple[dict | None, dict | None]:
    """Confluent's ``maybeSetMetadataRuleSet``: the config's default contract under the schema's, its override
    contract over both (the config in scope: the subject's over the global one)."""
    meta = merge_metadata(merge_metadata(config.get("defaultMetadata"), meta), config.get("overrideMetadata"))
    rules = merge_rule_sets(merge_rule_sets(config.get("defaultRuleSet"), rules), config.get("overrideRuleSet"))
    return meta, rules
