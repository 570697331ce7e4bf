"""The audit of the paper's §4: audited producers, (later) tier counters, reconciliation."""

from audit.producer import AuditedProducer

__all__ = ["AuditedProducer"]
