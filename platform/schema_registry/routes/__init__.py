"""Confluent Schema Registry's routes, one FastAPI router per resource (as Karapace splits them); ``common`` holds
what they share. ``schema_registry.app.create_app`` includes them, in the order of ``ROUTERS`` there."""
