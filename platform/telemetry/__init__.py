"""What every logbus service shares to be observed: Prometheus exposition (:mod:`telemetry.exposition`)."""
