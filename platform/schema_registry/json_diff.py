"""Compatibility of JSON schemas as Confluent's registry decides it (its ``SchemaDiff``): the differences between
an original and an updated schema, each a type and a JSON path, and which types a reader of the original can
take. BACKWARD compares (previous, new), FORWARD (new, previous). No I/O.

A pair of nodes is compared once (memoized by identity); a pair met again while it is being compared is a
recursive cycle, taken as compatible for the pass, and passes are repeated with the pairs found incompatible
until nothing changes, as Confluent's fixpoint does.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation, localcontext

from schema_registry.json_schema import Node

COMPATIBLE = frozenset("""
ID_CHANGED DESCRIPTION_CHANGED TITLE_CHANGED DEFAULT_CHANGED SCHEMA_REMOVED TYPE_EXTENDED
MAX_LENGTH_INCREASED MAX_LENGTH_REMOVED MIN_LENGTH_DECREASED MIN_LENGTH_REMOVED PATTERN_REMOVED
MAXIMUM_INCREASED MAXIMUM_REMOVED MINIMUM_DECREASED MINIMUM_REMOVED EXCLUSIVE_MAXIMUM_INCREASED
EXCLUSIVE_MAXIMUM_REMOVED EXCLUSIVE_MINIMUM_DECREASED EXCLUSIVE_MINIMUM_REMOVED MULTIPLE_OF_REDUCED MULTIPLE_OF_REMOVED
REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED DEPENDENCY_ARRAY_NARROWED DEPENDENCY_ARRAY_REMOVED
DEPENDENCY_SCHEMA_REMOVED MAX_PROPERTIES_INCREASED MAX_PROPERTIES_REMOVED MIN_PROPERTIES_DECREASED
MIN_PROPERTIES_REMOVED ADDITIONAL_PROPERTIES_ADDED ADDITIONAL_PROPERTIES_EXTENDED UNEVALUATED_PROPERTIES_ADDED
UNEVALUATED_PROPERTIES_EXTENDED PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
MAX_ITEMS_INCREASED MAX_ITEMS_REMOVED MIN_ITEMS_DECREASED MIN_ITEMS_REMOVED MAX_CONTAINS_INCREASED
MAX_CONTAINS_REMOVED MIN_CONTAINS_DECREASED MIN_CONTAINS_REMOVED UNIQUE_ITEMS_REMOVED ADDITIONAL_ITEMS_ADDED
ADDITIONAL_ITEMS_EXTENDED UNEVALUATED_ITEMS_ADDED UNEVALUATED_ITEMS_EXTENDED ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
ITEM_ADDED_TO_CLOSED_CONTENT_MODEL ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL
ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
ENUM_ARRAY_EXTENDED COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED NOT_TYPE_NARROWED
""".split())

# the message of each kind of difference, Confluent's wording ({path} the JSON path); the two %s are the reader's
# and the writer's roles ("new"/"old"), filled in by the level's check
_MESSAGES = [
    ({"MAXIMUM_ADDED", "MINIMUM_ADDED", "EXCLUSIVE_MAXIMUM_ADDED", "EXCLUSIVE_MINIMUM_ADDED", "MULTIPLE_OF_ADDED",
      "MAX_LENGTH_ADDED", "MIN_LENGTH_ADDED", "PATTERN_ADDED", "REQUIRED_ATTRIBUTE_ADDED", "MAX_PROPERTIES_ADDED",
      "MIN_PROPERTIES_ADDED", "DEPENDENCY_ARRAY_ADDED", "DEPENDENCY_SCHEMA_ADDED", "MAX_ITEMS_ADDED", "MIN_ITEMS_ADDED",
      "MAX_CONTAINS_ADDED", "MIN_CONTAINS_ADDED", "UNIQUE_ITEMS_ADDED", "ADDITIONAL_ITEMS_REMOVED",
      "ADDITIONAL_PROPERTIES_REMOVED", "UNEVALUATED_PROPERTIES_REMOVED", "UNEVALUATED_ITEMS_REMOVED"},
     "The keyword at path '{path}' in the %s schema is not present in the %s schema"),
    ({"MIN_LENGTH_INCREASED", "MINIMUM_INCREASED", "EXCLUSIVE_MINIMUM_INCREASED", "MIN_PROPERTIES_INCREASED",
      "MULTIPLE_OF_EXPANDED", "MIN_ITEMS_INCREASED", "MIN_CONTAINS_INCREASED"},
     "The value at path '{path}' in the %s schema is more than its value in the %s schema"),
    ({"MAX_LENGTH_DECREASED", "MAXIMUM_DECREASED", "MAX_ITEMS_DECREASED", "MAX_CONTAINS_DECREASED",
      "EXCLUSIVE_MAXIMUM_DECREASED", "MAX_PROPERTIES_DECREASED"},
     "The value at path '{path}' in the %s schema is less than its value in the %s schema"),
    ({"PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"},
     "The value at path '{path}' is different between the %s and %s schema"),
    ({"ADDITIONAL_ITEMS_NARROWED", "ENUM_ARRAY_NARROWED", "SUM_TYPE_NARROWED", "ADDITIONAL_PROPERTIES_NARROWED",
      "UNEVALUATED_PROPERTIES_NARROWED", "UNEVALUATED_ITEMS_NARROWED"},
     "An array or combined type at path '{path}' has fewer elements in the %s schema than the %s schema"),
    ({"DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED", "NOT_TYPE_EXTENDED"},
     "An array or combined type at path '{path}' has more elements in the %s schema than the %s schema"),
    ({"TYPE_CHANGED", "TYPE_NARROWED", "COMBINED_TYPE_CHANGED", "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
      "ENUM_ARRAY_CHANGED"},
     "A type at path '{path}' is different between the %s schema and the %s schema"),
    ({"REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL",
      "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"},
     "The %s schema has an open content model and has a property or item at path '{path}' which is missing in the "
     "%s schema"),
    ({"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"},
     "The %s schema has an unopen content model and has a required property at path '{path}' which is missing in "
     "the %s schema"),
    ({"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"},
     "The %s has a closed content model and is missing a property or item present at path '{path}' in the %s "
     "schema"),
    ({"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
      "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"},
     "A property or item is missing in the %s schema but present at path '{path}' in the %s schema and is not "
     "covered by its partially open content model"),
    ({"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
      "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"},
     "The %s schema has a property or item at path '{path}' which is missing in the %s schema and is not covered "
     "by its partially open content model"),
]


def describe(kind: str, path: str) -> str:
    """Confluent's ``Difference.toString()``, its two %s left for the roles."""
    text = next((template.replace("{path}", path) for kinds, template in _MESSAGES if kind in kinds), "")
    return '{errorType:"' + kind + '", description:"' + text + "'}"


class Context:
    def __init__(self, memo: dict, in_progress: set, seed: dict, optimism: list, path: tuple = ()):
        self.memo, self.in_progress, self.seed, self.optimism = memo, in_progress, seed, optimism
        self.path = list(path)
        self.diffs: list[tuple[str, str]] = []

    def sub(self) -> Context:
        return Context(self.memo, self.in_progress, self.seed, self.optimism, tuple(self.path))

    def where(self, *extra: str) -> str:
        return "#/" + "/".join([*self.path, *extra])

    def add(self, kind: str, attribute: str | None = None) -> None:
        self.diffs.append((kind, self.where(attribute) if attribute else self.where()))

    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.diffs)

    def enter(self, *parts: str):
        ctx = self

        class Scope:
            def __enter__(self):
                ctx.path.extend(parts)

            def __exit__(self, *_):
                del ctx.path[len(ctx.path) - len(parts):]
        return Scope()


def differences(original: Node, update: Node) -> list[tuple[str, str]]:
    """Every difference (kind, JSON path) from ``original`` to ``update``."""
    seed: dict = {}
    while True:
        memo: dict = {}
        optimism = [False]
        ctx = Context(memo, set(), seed, optimism)
        compare(ctx, original, update)
        incompatible = {k: v for k, v in memo.items() if any(kind not in COMPATIBLE for kind, _ in v)}
        if not optimism[0] or incompatible.keys() == seed.keys():
            return ctx.diffs
        seed = incompatible


def incompatible(original: Node, update: Node) -> list[str]:
    """Confluent's messages for the differences a reader of ``update`` cannot take (``original`` the writer's)."""
    return [describe(kind, path) for kind, path in differences(original, update) if kind not in COMPATIBLE]


def compare(ctx: Context, original: Node | None, update: Node | None) -> None:
    if original is None and update is None:
        return
    if original is None:
        ctx.add("SCHEMA_ADDED")
        return
    if update is None:
        ctx.add("SCHEMA_REMOVED")
        return
    key = (id(original), id(update))
    found = ctx.memo.get(key)
    if found is None:
        if key in ctx.in_progress:
            found = ctx.seed.get(key)
            if found is None:
                ctx.optimism[0] = True
                found = []
        else:
            ctx.in_progress.add(key)
            try:
                sub = Context(ctx.memo, ctx.in_progress, ctx.seed, ctx.optimism)
                _compare_types(sub, original, update)
                found = ctx.memo[key] = list(sub.diffs)
            finally:
                ctx.in_progress.discard(key)
    prefix = ctx.where()
    for kind, path in found:
        ctx.diffs.append((kind, prefix if len(path) <= 2 else (prefix.rstrip("/") + "/" + path[2:])))


def _compare_types(ctx: Context, original: Node, update: Node) -> None:
    if original.kind != "combined" and update.kind == "combined":
        if len(update.subschemas) == 1:
            sub = ctx.sub()
            compare(sub, original, update.subschemas[0])
            if sub.compatible():
                ctx.diffs.extend(sub.diffs)
                return
        elif update.criterion in ("anyOf", "oneOf"):
            for one in update.subschemas:
                sub = ctx.sub()
                compare(sub, original, one)
                if sub.compatible():
                    ctx.diffs.extend(sub.diffs)
                    ctx.add("SUM_TYPE_EXTENDED")
                    return
    elif original.kind == "combined" and update.kind != "combined":
        if len(original.subschemas) == 1:
            sub = ctx.sub()
            compare(sub, original.subschemas[0], update)
            if sub.compatible():
                ctx.diffs.extend(sub.diffs)
                return
        elif original.criterion == "allOf":
            for one in original.subschemas:
                sub = ctx.sub()
                compare(sub, one, update)
                if sub.compatible():
                    ctx.diffs.extend(sub.diffs)
                    ctx.add("PRODUCT_TYPE_NARROWED")
                    return
    if original.kind != update.kind:  # everit's classes: one kind, one class
        if original.kind == "false" or update.accepts_anything:
            return
        if _connect_bytes(original) and _connect_bytes(update):
            return
        ctx.add("TYPE_CHANGED")
        return
    for keyword, kind in (("id", "ID_CHANGED"), ("title", "TITLE_CHANGED"), ("description", "DESCRIPTION_CHANGED"),
                          ("default", "DEFAULT_CHANGED")):
        if original.common.get(keyword) != update.common.get(keyword):
            ctx.add(kind)
    handler = _HANDLERS.get(original.kind)
    if handler is not None:
        handler(ctx, original, update)


def _connect_bytes(node: Node) -> bool:
    return isinstance(node.raw, dict) and node.raw.get("connect.type") == "bytes"


def _limit(ctx: Context, attribute: str, old, new, stem: str) -> None:
    """ADDED / REMOVED / INCREASED / DECREASED of a numeric keyword."""
    if old == new:
        return
    if old is None:
        ctx.add(f"{stem}_ADDED", attribute)
    elif new is None:
        ctx.add(f"{stem}_REMOVED", attribute)
    elif old < new:
        ctx.add(f"{stem}_INCREASED", attribute)
    elif old > new:
        ctx.add(f"{stem}_DECREASED", attribute)


def _string(ctx: Context, original: Node, update: Node) -> None:
    _limit(ctx, "maxLength", original.max_length, update.max_length, "MAX_LENGTH")
    _limit(ctx, "minLength", original.min_length, update.min_length, "MIN_LENGTH")
    if original.pattern is None and update.pattern is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif original.pattern is not None and update.pattern is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif original.pattern != update.pattern:
        ctx.add("PATTERN_CHANGED", "pattern")


def _number(ctx: Context, original: Node, update: Node) -> None:
    _limit(ctx, "maximum", original.maximum, update.maximum, "MAXIMUM")
    _limit(ctx, "minimum", original.minimum, update.minimum, "MINIMUM")
    _limit(ctx, "exclusiveMaximum", original.exclusive_maximum, update.exclusive_maximum, "EXCLUSIVE_MAXIMUM")
    _limit(ctx, "exclusiveMinimum", original.exclusive_minimum, update.exclusive_minimum, "EXCLUSIVE_MINIMUM")
    old, new = original.multiple_of, update.multiple_of
    if old != new:
        if old is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif new is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        elif _divides(old, new):
            ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")
        elif _divides(new, old):
            ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
        else:
            ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    if original.requires_integer != update.requires_integer:
        ctx.add("TYPE_EXTENDED" if original.requires_integer else "TYPE_NARROWED")


def _divides(divisor: Decimal, value: Decimal) -> bool:
    """``value`` a whole multiple of ``divisor`` (exact, as Java's BigDecimal.remainder, at any magnitude)."""
    if divisor == 0:
        return False
    with localcontext() as exact:
        exact.prec = max(28, len(value.as_tuple().digits) + len(divisor.as_tuple().digits)
                         + abs(value.adjusted() - divisor.adjusted()) + 2)
        try:
            return value % divisor == 0
        except InvalidOperation:
            return False


def _enum(ctx: Context, original: Node, update: Node) -> None:
    if original.values != update.values:
        if update.values >= original.values:
            ctx.add("ENUM_ARRAY_EXTENDED", "enum")
        elif original.values >= update.values:
            ctx.add("ENUM_ARRAY_NARROWED", "enum")
        else:
            ctx.add("ENUM_ARRAY_CHANGED", "enum")


def _const(ctx: Context, original: Node, update: Node) -> None:
    if original.value != update.value:
        ctx.add("ENUM_ARRAY_CHANGED", "const")


def _not(ctx: Context, original: Node, update: Node) -> None:
    with ctx.enter("not"):
        sub = ctx.sub()
        compare(sub, update.must_not_match, original.must_not_match)
        ctx.add("NOT_TYPE_NARROWED" if sub.compatible() else "NOT_TYPE_EXTENDED")


def _distinct(nodes: list) -> list:
    """Subschemas as a set of distinct schemas (Confluent's LinkedHashSet of JsonSchema: equal documents once)."""
    seen, out = set(), []
    for node in nodes:
        key = (node.kind, repr(node.raw))
        if key not in seen:
            seen.add(key)
            out.append(node)
    return out


def _combined(ctx: Context, original: Node, update: Node) -> None:
    a, b = original.criterion, update.criterion
    if a != b:
        single_a, single_b = len(original.subschemas) == 1, len(update.subschemas) == 1
        if b == "anyOf" or (single_a and single_b) or (single_a and b == "oneOf") or (single_b and a == "allOf"):
            ctx.add("COMBINED_TYPE_EXTENDED")
        else:
            ctx.add("COMBINED_TYPE_CHANGED")
            return
    olds, news = _distinct(original.subschemas), _distinct(update.subschemas)
    if len(olds) < len(news):
        ctx.add("PRODUCT_TYPE_EXTENDED" if b == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(olds) > len(news):
        ctx.add("SUM_TYPE_NARROWED" if a in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[int, dict[int, list]] = {}
    for i, old in enumerate(olds):
        with ctx.enter(f"{a}/{i}"):
            for j, new in enumerate(news):
                sub = ctx.sub()
                compare(sub, old, new)
                if sub.compatible():
                    edges.setdefault(i, {})[j] = sub.diffs
    matching = _maximum_matching(edges)
    for i, j in sorted(matching.items()):
        ctx.diffs.extend(edges[i][j])
    if len(matching) < min(len(olds), len(news)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _maximum_matching(edges: dict[int, dict[int, list]]) -> dict[int, int]:
    """A maximum-cardinality matching of the bipartite graph (augmenting paths): old index -> new index."""
    owner: dict[int, int] = {}

    def augment(i: int, seen: set) -> bool:
        for j in edges.get(i, {}):
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in edges:
        augment(i, set())
    return {i: j for j, i in owner.items()}


def _object(ctx: Context, original: Node, update: Node) -> None:
    with ctx.enter("required"):
        for name in original.properties:
            if name in update.properties:
                was, now = name in original.required, name in update.required
                if was and not now:
                    ctx.add("REQUIRED_ATTRIBUTE_REMOVED", name)
                elif now and not was:
                    ctx.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if update.properties[name].has_default
                            else "REQUIRED_ATTRIBUTE_ADDED", name)
    with ctx.enter("properties"):
        for name in list(original.properties) + [n for n in update.properties if n not in original.properties]:
            with ctx.enter(name):
                _property(ctx, original, update, name)
    with ctx.enter("dependencies"):
        for name in _union(original.property_dependencies, update.property_dependencies):
            old, new = original.property_dependencies.get(name), update.property_dependencies.get(name)
            if new is None:
                ctx.add("DEPENDENCY_ARRAY_REMOVED", name)
            elif old is None:
                ctx.add("DEPENDENCY_ARRAY_ADDED", name)
            elif old != new:
                ctx.add("DEPENDENCY_ARRAY_EXTENDED" if new >= old else
                        "DEPENDENCY_ARRAY_NARROWED" if old >= new else "DEPENDENCY_ARRAY_CHANGED", name)
        for name in _union(original.schema_dependencies, update.schema_dependencies):
            old, new = original.schema_dependencies.get(name), update.schema_dependencies.get(name)
            if new is None:
                ctx.add("DEPENDENCY_SCHEMA_REMOVED", name)
            elif old is None:
                ctx.add("DEPENDENCY_SCHEMA_ADDED", name)
            else:
                with ctx.enter(name):
                    compare(ctx, old, new)
    _additional(ctx, "additionalProperties", "ADDITIONAL_PROPERTIES", (original.permits_additional, original.additional),
                (update.permits_additional, update.additional))
    _unevaluated(ctx, original.unevaluated, update.unevaluated, "unevaluatedProperties", "UNEVALUATED_PROPERTIES")
    _limit(ctx, "maxProperties", original.max_properties, update.max_properties, "MAX_PROPERTIES")
    _limit(ctx, "minProperties", original.min_properties, update.min_properties, "MIN_PROPERTIES")


def _additional(ctx: Context, keyword: str, stem: str, old: tuple, new: tuple) -> None:
    """additionalProperties / additionalItems: (permitted at all, the schema of the extra ones or None)."""
    (old_permits, old_schema), (new_permits, new_schema) = old, new
    with ctx.enter(keyword):
        if old_permits != new_permits:
            ctx.add(f"{stem}_ADDED" if new_permits else f"{stem}_REMOVED")
        elif old_schema is None and new_schema is not None:
            ctx.add(f"{stem}_NARROWED")
        elif new_schema is None and old_schema is not None:
            ctx.add(f"{stem}_EXTENDED")
        else:
            compare(ctx, old_schema, new_schema)


def _covered(ctx: Context, old: Node, new: Node, stem: str) -> None:
    """A property or item on one side only, compared with what the other side's partially open content model
    gives it: ``<stem>_IS_COVERED_...`` or ``<stem>_NOT_COVERED_...``."""
    sub = ctx.sub()
    compare(sub, old, new)
    ctx.diffs.extend(sub.diffs)
    ctx.add(f"{stem}_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible()
            else f"{stem}_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")


def _union(a: dict, b: dict) -> list:
    return list(a) + [k for k in b if k not in a]


def _open(permits: bool, additional: Node | None, unevaluated: Node | None) -> bool:
    """An open content model: extra properties or items of any kind allowed."""
    return permits and additional is None and (unevaluated is None or unevaluated.accepts_anything)


def _partial(permits: bool, additional: Node | None, unevaluated: Node | None) -> Node | None:
    """The schema a partially open content model gives extra properties or items, if any."""
    if additional is not None:
        return additional
    if permits and unevaluated is not None and unevaluated.kind != "false" and not unevaluated.accepts_anything:
        return unevaluated
    return None


def _open_object(node: Node) -> bool:
    return not node.pattern_properties and _open(node.permits_additional, node.additional, node.unevaluated)


def _partial_object(node: Node, name: str) -> Node | None:
    for pattern, schema in node.pattern_properties:
        if pattern.search(name):
            return schema
    return _partial(node.permits_additional, node.additional, node.unevaluated)


def _property(ctx: Context, original: Node, update: Node, name: str) -> None:
    old, new = original.properties.get(name), update.properties.get(name)
    if new is None:
        if _open_object(update):
            ctx.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
            return
        partial = _partial_object(update, name)
        if partial is not None:
            _covered(ctx, old, partial, "PROPERTY_REMOVED")
        else:
            ctx.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if old.kind == "false"
                    else "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    elif old is None:
        required = name in update.required
        if _open_object(original):
            if new.accepts_anything:
                ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
            elif required:
                ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL" if new.has_default
                        else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
            else:
                ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
            return
        partial = _partial_object(original, name)
        if partial is not None:
            _covered(ctx, partial, new, "PROPERTY_ADDED")
        if required:
            ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if new.has_default
                    else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
        else:
            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
    else:
        compare(ctx, old, new)


def _unevaluated(ctx: Context, old: Node | None, new: Node | None, keyword: str, stem: str) -> None:
    if old is None and new is None:
        return
    with ctx.enter(keyword):
        if old is None:
            ctx.add(f"{stem}_REMOVED" if new.kind == "false" else f"{stem}_NARROWED")
        elif new is None:
            ctx.add(f"{stem}_ADDED" if old.kind == "false" else f"{stem}_EXTENDED")
        elif old.kind == "false" and new.kind != "false":
            ctx.add(f"{stem}_ADDED")
        elif old.kind != "false" and new.kind == "false":
            ctx.add(f"{stem}_REMOVED")
        elif old.accepts_anything and not new.accepts_anything:
            ctx.add(f"{stem}_NARROWED")
        elif not old.accepts_anything and new.accepts_anything:
            ctx.add(f"{stem}_EXTENDED")
        else:
            compare(ctx, old, new)


def _open_array(node: Node) -> bool:
    return _open(node.permits_additional_items, node.additional_items, node.unevaluated)


def _partial_array(node: Node) -> Node | None:
    return _partial(node.permits_additional_items, node.additional_items, node.unevaluated)


def _array(ctx: Context, original: Node, update: Node) -> None:
    with ctx.enter("items"):
        compare(ctx, original.all_items, update.all_items)
    olds, news = original.item_schemas or [], update.item_schemas or []
    for index in range(max(len(olds), len(news))):
        with ctx.enter(f"items/{index}"):
            if index < len(olds) and index < len(news):
                compare(ctx, olds[index], news[index])
            elif index < len(olds):
                _item_removed(ctx, olds[index], update)
            else:
                _item_added(ctx, news[index], original)
    _additional(ctx, "additionalItems", "ADDITIONAL_ITEMS", (original.permits_additional_items, original.additional_items),
                (update.permits_additional_items, update.additional_items))
    _unevaluated(ctx, original.unevaluated, update.unevaluated, "unevaluatedItems", "UNEVALUATED_ITEMS")
    _limit(ctx, "maxItems", original.max_items, update.max_items, "MAX_ITEMS")
    _limit(ctx, "minItems", original.min_items, update.min_items, "MIN_ITEMS")
    if original.unique_items != update.unique_items:
        ctx.add("UNIQUE_ITEMS_REMOVED" if original.unique_items else "UNIQUE_ITEMS_ADDED", "uniqueItems")
    _limit(ctx, "maxContains", original.max_contains, update.max_contains, "MAX_CONTAINS")
    _limit(ctx, "minContains", original.min_contains, update.min_contains, "MIN_CONTAINS")


def _item_removed(ctx: Context, old: Node, update: Node) -> None:
    if _open_array(update):
        ctx.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
        return
    partial = _partial_array(update)
    if partial is not None:
        _covered(ctx, old, partial, "ITEM_REMOVED")
    else:
        ctx.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if old.kind == "false"
                else "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")


def _item_added(ctx: Context, new: Node, original: Node) -> None:
    if _open_array(original):
        ctx.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if new.accepts_anything
                else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
        return
    partial = _partial_array(original)
    if partial is not None:
        _covered(ctx, partial, new, "ITEM_ADDED")
    else:
        ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")


_HANDLERS = {"string": _string, "number": _number, "enum": _enum, "const": _const, "not": _not,
             "combined": _combined, "object": _object, "array": _array}

