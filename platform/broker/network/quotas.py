"""Connection quotas: Kafka's ``max.connections`` (broker-wide and per listener) and ``max.connections.per.ip``
(with ``max.connections.per.ip.overrides``). No I/O: the listener asks :meth:`ConnectionQuotas.admit` for each
accepted connection and calls :meth:`~ConnectionQuotas.release` when it ends.

As Kafka (KIP-402), connections on the inter-broker listener do not count against the broker-wide
``max.connections`` (a broker flooded by clients can still replicate and be controlled), though the listener's
own ``listener.name.<listener>.max.connections`` and the per-IP limits apply to them. Departure: over a limit,
Kafka's acceptor stops accepting until a connection closes (new ones wait in the kernel's backlog); logbus
accepts and closes the new connection at once, so a flood cannot pile up open sockets and clients see a refused
connection they retry with backoff.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass, field

UNLIMITED = 2**31 - 1


def normal_host(host: str) -> str:
    """An IP address in its canonical form; a host name in lower case."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return host.lower()


@dataclass
class ConnectionQuotas:
    max_connections: int = UNLIMITED
    per_ip: int = UNLIMITED
    overrides: dict[str, int] = field(default_factory=dict)
    listener_limits: dict[str, int] = field(default_factory=dict)  # listener name -> its own max.connections
    inter_broker_listener: str | None = None
    total: int = 0  # connections counted against max.connections (the inter-broker listener's are not)
    by_ip: Counter = field(default_factory=Counter)
    by_listener: Counter = field(default_factory=Counter)
    refused: Counter = field(default_factory=Counter)  # reason -> connections closed at accept

    @classmethod
    def from_config(cls, config) -> "ConnectionQuotas":
        limits = {}
        for spec in config.listeners:
            own = config.listener_value(spec.name, "max.connections")
            if f"listener.name.{spec.name.lower()}.max.connections" in config.explicit:
                limits[spec.name] = own
        return cls(config["max.connections"], config["max.connections.per.ip"],
                   config["max.connections.per.ip.overrides"], limits, config.inter_broker_listener)

    def ip_limit(self, ip: str) -> int:
        return self.overrides.get(normal_host(ip), self.per_ip)

    def admit(self, listener: str, ip: str) -> str | None:
        """Count a new connection; or the reason it must be closed (nothing counted then)."""
        ip = normal_host(ip)
        if self.by_ip[ip] >= self.ip_limit(ip):
            reason = f"max.connections.per.ip={self.ip_limit(ip)} reached for {ip}"
        elif self.by_listener[listener] >= self.listener_limits.get(listener, UNLIMITED):
            reason = f"listener.name.{listener.lower()}.max.connections={self.listener_limits[listener]} reached"
        elif listener != self.inter_broker_listener and self.total >= self.max_connections:
            reason = f"max.connections={self.max_connections} reached"
        else:
            self.by_ip[ip] += 1
            self.by_listener[listener] += 1
            if listener != self.inter_broker_listener:
                self.total += 1
            return None
        self.refused[reason.split("=")[0]] += 1
        return reason

    def release(self, listener: str, ip: str) -> None:
        ip = normal_host(ip)
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]
        self.by_listener[listener] -= 1
        if listener != self.inter_broker_listener:
            self.total -= 1
