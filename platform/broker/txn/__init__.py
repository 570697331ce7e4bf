"""The transaction coordinator (Kafka's exactly-once machinery); see docs/design/transactions.md."""
