"""The fuzzer's vocabulary: the names it may use, the value ranges, the fields and APIs that may wait."""

from __future__ import annotations

API_VERSIONS = 18

# Topics the fuzzer may name (created before the run), and topics it must never name (the records acknowledged
# before the run live there; the second client's canary topic).
POOL_TOPICS = {"fz-0": 3, "fz-1": 1, "fz-compact": 1}
COMPACTED_TOPIC = "fz-compact"
ADVERSARIAL_TOPICS = ["", ".", "..", "../../etc", "a/b", "x" * 249, "y" * 250, "\u00fc", "nul\x00l", " ",
                      "__consumer_offsets", "fz-0\n", "-", "_"]
GROUPS = ["fz-group", "fz-g2", ""]
CONFIG_NAMES = ["cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
                "max.message.bytes", "min.insync.replicas", "min.cleanable.dirty.ratio", "delete.retention.ms",
                "message.timestamp.type", "unclean.leader.election.enable", "no.such.config", ""]
CONFIG_VALUES = ["1", "0", "-1", "14", "1000", "1048576", "86400000", "compact", "delete", "compact,delete",
                 "0.5", "2.5", "CreateTime", "LogAppendTime", "abc", "99999999999999999999", "-5", ""]

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1), "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1), "timedelta_i32": (-(2**31), 2**31 - 1), "timedelta_i64": (-(2**63), 2**63 - 1),
    "datetime_i64": (-(2**63), 2**63 - 1), "error_code": (-(2**15), 2**15 - 1),
}
FIXED_FORMATS = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint8": ">B", "uint16": ">H",
                 "uint32": ">I", "uint64": ">Q", "float64": ">d", "bool": ">?", "timedelta_i32": ">i",
                 "timedelta_i64": ">q", "datetime_i64": ">q", "error_code": ">h"}
# Fields a broker may legitimately wait on (long polls, rebalances): valid requests keep them small and the
# mutations leave them alone, so that "no answer within the bound" means a hang, not a long poll asked for.
WAIT_FIELDS = {"timeout", "max_wait", "session_timeout", "rebalance_timeout", "transaction_timeout"}
# APIs whose answer may legitimately wait (Fetch long poll, group rebalances)
WAITING_APIS = {1, 11, 14}
