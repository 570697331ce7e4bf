"""SASL/GSSAPI (Kerberos v5) on the server side, as Kafka's brokers run it through Java's ``GssKrb5Server``
(RFC 4752): the client's context tokens are accepted with the listener's keytab until the context is
established; the client answers the last one with an empty token; the server then sends, wrapped, the security
layers it offers (authentication only, as Kafka: ``auth``) and its maximum buffer (65536); the client's wrapped
answer picks the layer and may carry an authorization id, which Kafka ignores (its callback handler authorizes the
authenticated name). The principal is ``User:`` and the authenticated Kerberos name mapped by
``sasl.kerberos.principal.to.local.rules`` (Kafka's ``KerberosShortNamer``: ``DEFAULT`` and ``RULE:...``).

The listener's keytab and principal come from its JAAS entry (``listener.name.<l>.gssapi.sasl.jaas.config``:
``com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="..."
principal="kafka/host@REALM";``), whose first component must be ``sasl.kerberos.service.name``. Kerberos is
MIT's, through the ``gssapi`` package (the ``kerberos`` extra), imported only where GSSAPI is enabled. Accepting a
context reads the keytab and talks to no KDC. Between brokers (:class:`ClientContext`), a broker logs in with the
same keytab and principal and asks the KDC for a ticket of ``<service name>/<other broker's host>``; its tickets
live in a memory cache of its own."""

from __future__ import annotations

import re
from dataclasses import dataclass

KRB5_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
QOP_AUTH = 1  # RFC 4752's "no security layer", the only one Kafka offers
MAX_BUFFER = 65536  # Java's default javax.security.sasl.maxbuffer


class GssapiFailure(ConnectionError):
    """The authentication failed; the message says why (a server's client gets Kafka's generic message; a broker
    logging in to another sees it as a refused connection)."""


class NoMatchingRule(ValueError):
    pass


# Kafka's KerberosShortNamer: DEFAULT, or RULE:[n:format](match)s/from/to/g with an optional /L or /U
_RULE = re.compile(r"\s*((DEFAULT)|(RULE:\[(\d*):([^\]]*)](\(([^)]*)\))?(s/([^/]*)/([^/]*)/(g)?)?/?(L|U)?))")
_NAME = re.compile(r"([^/@]+)(/([^/@]+))?(@([^/@]+))?")
_PARAM = re.compile(r"([^$]*)(\$(\d*))?")


@dataclass(frozen=True)
class Rule:
    default: bool
    components: int = 0
    fmt: str = ""
    match: str | None = None
    pattern: str | None = None
    replacement: str | None = None
    repeat: bool = False
    case: str | None = None

    def apply(self, params: list[str], default_realm: str) -> str | None:
        """``params``: realm, then the name's components (Kafka's ``KerberosRule.apply``)."""
        if self.default:
            return params[1] if params[0] == default_realm else None
        if len(params) - 1 != self.components:
            return None
        base = _replace_parameters(self.fmt, params)
        if self.match is not None and not re.fullmatch(self.match, base):
            return None
        result = base
        if self.pattern is not None:
            java_repl = re.sub(r"\$(\d)", r"\\\1", self.replacement or "")
            result = re.sub(self.pattern, java_repl, base, count=0 if self.repeat else 1)
        if "@" in result or "/" in result:
            raise NoMatchingRule(f"Non-simple name {result} after auth_to_local rule {self}")
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _replace_parameters(fmt: str, params: list[str]) -> str:
    out = []
    for literal, dollar, number in _PARAM.findall(fmt):
        out.append(literal)
        if dollar:
            index = int(number) if number else -1
            if not 0 <= index < len(params):
                raise NoMatchingRule(f"index {number} from {fmt} is outside of the valid range 0 to {len(params) - 1}")
            out.append(params[index])
    return "".join(out)


def parse_rules(rules: list[str]) -> list[Rule]:
    """Kafka's ``sasl.kerberos.principal.to.local.rules`` (ValueError on a rule it would refuse)."""
    out = []
    for text in rules:
        text = text.strip()
        m = _RULE.fullmatch(text)
        if m is None:
            raise ValueError(f"Invalid rule: {text}")
        if m.group(2):
            out.append(Rule(True))
        else:
            out.append(Rule(False, int(m.group(4) or 0), m.group(5), m.group(7), m.group(9), m.group(10),
                            m.group(11) == "g", m.group(12)))
    return out


def short_name(principal: str, rules: list[Rule], default_realm: str) -> str:
    """The local name of a Kerberos principal (``alice@REALM`` -> ``alice`` by DEFAULT); NoMatchingRule."""
    m = _NAME.fullmatch(principal)
    if m is None:
        raise NoMatchingRule(f"Malformed Kerberos name: {principal}")
    primary, host, realm = m.group(1), m.group(3), m.group(5)
    if realm is None:
        return principal  # Kafka: a name without a realm is its own short name
    params = [realm, primary] + ([host] if host is not None else [])
    for rule in rules:
        result = rule.apply(params, default_realm)
        if result is not None:
            return result
    raise NoMatchingRule(f"No rules apply to {principal}, rules {rules}")


class Acceptor:
    """One listener's Kerberos identity: the keytab's credentials for ``principal``, the name rules."""

    def __init__(self, principal: str, keytab: str, rules: list[Rule]):
        import gssapi

        self._gssapi = gssapi
        name = gssapi.Name(principal, gssapi.NameType.kerberos_principal)
        self.credentials = gssapi.Credentials(name=name, usage="accept", store={"keytab": keytab})
        self.rules = rules
        self.default_realm = str(gssapi.Name("x", gssapi.NameType.kerberos_principal)
                                 .canonicalize(gssapi.MechType.kerberos)).partition("@")[2]

    def exchange(self) -> "ServerContext":
        return ServerContext(self)


class ServerContext:
    """One GSSAPI authentication: :meth:`step` takes the client's token and gives the reply; then
    :attr:`complete` and :attr:`principal` (``User:<short name>``). GssapiFailure."""

    def __init__(self, acceptor: Acceptor):
        self._acceptor = acceptor
        self._context = acceptor._gssapi.SecurityContext(creds=acceptor.credentials, usage="accept")
        self._stage = 0
        self.complete = False
        self.principal: str | None = None
        self.kerberos_name: str | None = None

    def step(self, token: bytes) -> bytes:
        errors = (self._acceptor._gssapi.exceptions.GSSError, ValueError)
        try:
            if self._stage == 0:
                out = self._context.step(token)
                if self._context.complete:
                    self._stage = 1
                return out or b""
            if self._stage == 1:  # the client's answer to the context's last token
                if token:
                    raise GssapiFailure("Handshake expecting no response data from client")
                self._stage = 2
                offer = bytes([QOP_AUTH]) + MAX_BUFFER.to_bytes(3, "big")
                return self._context.wrap(offer, False).message
            if self._stage == 2:
                answer = self._context.unwrap(token).message
                if len(answer) < 4:
                    raise GssapiFailure("Invalid message from client: the security layer message is too short")
                if answer[0] & QOP_AUTH == 0 or answer[0] & ~QOP_AUTH:
                    raise GssapiFailure(f"Client selected unsupported protection: {answer[0]}")
                self.kerberos_name = str(self._context.initiator_name)
                try:
                    local = short_name(self.kerberos_name, self._acceptor.rules, self._acceptor.default_realm)
                except NoMatchingRule as exc:
                    raise GssapiFailure(f"Failed to set name for '{self.kerberos_name}' based on Kerberos "
                                        f"authentication rules: {exc}") from None
                self._stage = 3
                self.complete, self.principal = True, f"User:{local}"
                return b""
        except errors as exc:
            raise GssapiFailure(str(exc)) from None
        raise GssapiFailure("unexpected GSSAPI token after the authentication completed")


class ClientContext:
    """This broker authenticating to another with its keytab (the client side of RFC 4752): :meth:`first` is the
    initial context token (made here, which asks the KDC for a service ticket: construct it off the event loop),
    ``respond(server token)`` the next one, None when done. GssapiFailure."""

    def __init__(self, principal: str, keytab: str, service: str, host: str, cache: str):
        import gssapi

        self._gssapi = gssapi
        self.principal = principal
        try:
            credentials = gssapi.Credentials(name=gssapi.Name(principal, gssapi.NameType.kerberos_principal),
                                             usage="initiate", store={"client_keytab": keytab, "ccache": cache})
            target = gssapi.Name(f"{service}@{host}", gssapi.NameType.hostbased_service)
            self._context = gssapi.SecurityContext(name=target, creds=credentials, usage="initiate")
            self._first = self._context.step(None) or b""
        except gssapi.exceptions.GSSError as exc:
            raise GssapiFailure(f"no Kerberos ticket for {service}/{host} as {principal}: {exc}") from None
        self._done = False

    def first(self) -> bytes:
        return self._first

    def respond(self, token: bytes) -> bytes | None:
        try:
            if self._done:
                if token:
                    raise GssapiFailure("unexpected GSSAPI token after the authentication completed")
                return None
            if not self._context.complete:
                return self._context.step(bytes(token)) or b""
            offer = self._context.unwrap(bytes(token)).message  # the server's security layers and buffer
            if len(offer) != 4 or not offer[0] & QOP_AUTH:
                raise GssapiFailure(f"the server offers no authentication-only layer: {offer!r}")
            self._done = True
            return self._context.wrap(bytes([QOP_AUTH]) + offer[1:4] + self.principal.encode(), False).message
        except self._gssapi.exceptions.GSSError as exc:
            raise GssapiFailure(str(exc)) from None


def jaas_identity(options: dict[str, str]) -> tuple[str, str]:
    """(principal, keytab) from a Krb5LoginModule entry's options; ValueError when one is missing."""
    if str(options.get("useKeyTab", "false")).lower() != "true" or not options.get("keyTab"):
        raise ValueError(f"the {KRB5_MODULE} entry needs useKeyTab=true and keyTab")
    if not options.get("principal"):
        raise ValueError(f"the {KRB5_MODULE} entry needs principal")
    return options["principal"], options["keyTab"]
