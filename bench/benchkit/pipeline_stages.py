"""What the whole-pipeline benchmark (``bench/pipeline_benchmark.py``) measures: the topic its producers send to
and the stages and audit tiers, in pipeline order, whose rates and windows it compares to the offered rate."""

from __future__ import annotations

TOPIC = "page-views"
PARTITIONS = 3
# pipeline order: the stages whose rates are compared to the offered rate
STAGES = [("producers", "producers (sent)"), ("live", "live brokers (page-views end offsets)"),
          ("live_counter", "live audit counter"), ("mirror", "mirror (records copied)"),
          ("offline", "offline brokers (page-views end offsets)"), ("offline_counter", "offline audit counter")]
TIERS = ("live", "offline")
