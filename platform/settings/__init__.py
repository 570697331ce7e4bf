"""Configuration shared by every logbus service: the properties-file parser and the client security settings
(Kafka's and librdkafka's names), parsed once here. No I/O beyond reading the files named."""
