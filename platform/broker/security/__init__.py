"""Security of the listeners: TLS contexts, SASL (PLAIN and SCRAM), JAAS parsing and SCRAM credentials.
The modules here do no network I/O; the listener (``broker.network.server``) and the inter-broker connections
(``broker.network.connect``) drive them."""
