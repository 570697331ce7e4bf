"""Schema contexts (Confluent's): subjects named ``:.ctx:subject`` live in context ``.ctx``, each context with
ids of its own; the default context is ``.`` (plain subject names). No I/O but the URL filter's.

- :func:`split` is Confluent's ``QualifiedSubject``: ``:.ctx:sub`` → (``.ctx``, ``sub``), ``:.ctx`` → (``.ctx``,
  ""), a name without ``:.`` (or ``:*:``) is the default context's; :func:`qualified` the other way (``:.:foo`` is
  ``foo``).
- :func:`normalize_context` is ``QualifiedSubject.normalizeContext``: ``ctx``, ``.ctx``, ``:.ctx:`` → ``:.ctx:``,
  ``.`` → "" (the default), a colon inside is refused.
- :class:`ContextFilter` is Confluent's ``ContextFilter``: ``/contexts/{ctx}/...`` is rewritten before routing —
  the subject after ``subjects`` (and ``deks``), or after a leading ``config``/``mode``, is qualified with the
  context; ``/contexts/{ctx}/config`` becomes ``/config/:.ctx:``; ``/schemas/ids/...`` gets ``subject=:.ctx:``,
  ``/subjects`` and ``/schemas`` a qualified ``subjectPrefix``. So a client whose base URL is
  ``http://registry/contexts/.ctx`` works in that context.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, quote, unquote, urlencode

DEFAULT = "."
WILDCARD = "*"
GLOBAL = ".__GLOBAL"  # the context whose config and mode are every context's fallback
RESERVED_SUBJECTS = ("__GLOBAL", "__EMPTY")


class ContextError(ValueError):
    pass


def split(name: str) -> tuple[str, str]:
    """(context, subject) of a possibly qualified subject name."""
    if name.startswith(":."):
        end = name.find(":", 1)
        if end < 0:
            return name[1:], ""
        return name[1:end], name[end + 1:]
    if name.startswith(":*:"):
        return WILDCARD, name[3:]
    return DEFAULT, name


def qualified(context: str, subject: str) -> str:
    return subject if context == DEFAULT else f":{context}:{subject}"


def context_of(name: str | None) -> str:
    return DEFAULT if name is None else split(name)[0]


def normalize(name: str) -> str:
    """Confluent's ``QualifiedSubject.normalize``: ``:.:foo`` → ``foo``."""
    return qualified(*split(name))


def normalize_context(context: str) -> str:
    """``:.ctx:`` for a context name given as ``ctx``, ``.ctx`` or ``:.ctx:``; "" for the default."""
    if context.startswith(":"):
        context = context[1:]
    if context.endswith(":"):
        context = context[:-1]
    if ":" in context:
        raise ContextError(f"Context name '{context}' cannot contain a colon")
    if not context.startswith("."):
        context = "." + context
    return "" if context == DEFAULT else f":{context}:"


def qualified_references(context: str, references: list[dict] | None, reference_format: str | None) -> list | None:
    """``referenceFormat=qualified`` (Confluent's ``getSchema``/``getSchemaByVersion``): the references of a schema in
    a named context, each unqualified subject qualified with that context (``qualifySubjectWithParent``); anything
    else as stored."""
    if reference_format != "qualified" or context == DEFAULT or not references:
        return references
    return [{**ref, "subject": qualified(context, ref["subject"])} if split(ref["subject"])[0] == DEFAULT else ref
            for ref in references]


def context_scope(context: str) -> str | None:
    """The config/mode scope of a context: None (the global one) for the default context, else ``:.ctx:``."""
    return None if context == DEFAULT else f":{context}:"


def valid_subject(name: str, config_or_mode: bool = False) -> bool:
    """Confluent's ``isValidSubject`` for registering (and, ``config_or_mode``, for a config or mode's scope)."""
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        return False
    context, subject = split(name)
    if subject in RESERVED_SUBJECTS or (not config_or_mode and context == GLOBAL):
        return False
    return config_or_mode or subject not in ("", "*")


def _qualify(segment: str, prefix: str) -> str:
    decoded = unquote(segment)
    if decoded.startswith(":.") or decoded.startswith(":*:"):
        return segment
    return quote(prefix, safe=":.") + segment


def rewrite(path: str, query: str) -> tuple[str, str]:
    """Confluent's ``ContextFilter`` for a path starting ``/contexts/``: (new path, new query string)."""
    segments = [s for s in path.split("/") if s]
    if len(segments) < 2 or segments[0] != "contexts":
        return path, query
    prefix = normalize_context(unquote(segments[1]))
    rest = segments[2:]
    if not rest:
        return f"/contexts/{quote(prefix, safe=':.') or ':.:'}/", query
    out = []
    subject_next = False
    for i, segment in enumerate(rest):
        if subject_next:
            out.append(_qualify(segment, prefix))
            subject_next = False
            continue
        out.append(segment)
        if segment in ("subjects", "deks") or (i == 0 and segment in ("config", "mode")):
            subject_next = True
    if subject_next and out[0] in ("config", "mode") and len(out) == 1:
        if prefix:
            out.append(quote(prefix, safe=":."))
    new_path = "/" + "/".join(out)
    params = parse_qsl(query, keep_blank_values=True)
    if out[:2] == ["schemas", "ids"]:
        subject = next((v for k, v in params if k == "subject"), "")
        if not (subject.startswith(":.") or subject.startswith(":*:")):
            subject = prefix + subject
        params = [(k, v) for k, v in params if k != "subject"] + [("subject", subject)]
    elif out in (["schemas"], ["subjects"]):
        prefixes = [v for k, v in params if k == "subjectPrefix"] or [""]
        prefixes = [v if v.startswith(":.") or v.startswith(":*:") else prefix + v for v in prefixes]
        params = [(k, v) for k, v in params if k != "subjectPrefix"] + [("subjectPrefix", v) for v in prefixes]
    return new_path, urlencode(params)


class ContextFilter:
    """ASGI middleware, outside authorization and forwarding (they see the rewritten path)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/contexts/"):
            raw = scope.get("raw_path") or scope["path"].encode()
            try:
                path, query = rewrite(raw.decode("latin-1").split("?", 1)[0],
                                      scope.get("query_string", b"").decode("latin-1"))
            except ContextError as exc:
                body = json.dumps({"error_code": 400, "message": str(exc)}).encode()
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"application/vnd.schemaregistry.v1+json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
            # in place: the request metrics around it label the request by the route that answered it
            scope.update(path=unquote(path), raw_path=path.encode("latin-1"), query_string=query.encode("latin-1"))
        await self.app(scope, receive, send)


def within(context: str, subject: str | None) -> str | None:
    """A reference's subject as the referring schema's context reads it (Confluent's
    ``qualifySubjectWithParent``): a plain name is in that context."""
    if subject is None or context == DEFAULT or subject.startswith(":.") or subject.startswith(":*:"):
        return subject
    return qualified(context, subject)


def _holds(registry, subject: str, schema_id: int) -> bool:
    return any(v.schema_id == schema_id for v in registry.subjects.get(subject, {}).values())


def id_context(registry, schema_id: int, subject: str | None) -> str | None:
    """The context ``GET /schemas/ids/{id}?subject=`` reads (Confluent's ``getSchemaKeyUsingContexts``); None: the
    subject named does not hold the id."""
    if not subject:
        return DEFAULT
    context, name = split(subject)
    if context == WILDCARD:
        context = DEFAULT
    if not name:
        return context
    if context != DEFAULT:
        return context if _holds(registry, subject, schema_id) else None
    if _holds(registry, name, schema_id):
        return DEFAULT
    for other in sorted(registry.contexts):
        if _holds(registry, qualified(other, name), schema_id):
            return other
    return DEFAULT


def matches_prefix(subject: str, prefix: str | None) -> bool:
    """``subjectPrefix`` of GET /subjects and /schemas: ``:.ctx:foo`` in that context, ``:*:foo`` in any, a plain
    one in the default context; None (GET /subjects without one) is every subject of every context."""
    if prefix is None:
        return True
    context, name = split(subject)
    wanted_context, wanted = split(prefix)
    return (wanted_context in (WILDCARD, context)) and name.startswith(wanted)
