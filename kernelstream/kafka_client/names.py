"""Names shared by the command line and the Kafka clients, importable without loading them."""

SCHEME = "kafka://"  # a topic URL: kafka://HOST:PORT[,HOST:PORT...]/TOPIC
KAFKA_CLIENTS = ("auto", "confluent", "kafka-python")  # the live stream reader's client
# how the live stream's reader groups the partitions it merges (kafka_client.partitions)
MERGES = ("all", "partition")
