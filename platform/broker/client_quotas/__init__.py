"""Client quotas (KIP-13, KIP-55, KIP-546): byte rates per user and client id, set with AlterClientQuotas and
kept where Kafka keeps them. :mod:`.entities` (names, paths, filters, validation), :mod:`.rate` (Kafka's sampled
rate and throttle time), :mod:`.store` (ZooKeeper or a standalone file), :mod:`.manager` (what a request pays)."""
