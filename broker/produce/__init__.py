"""The write path: the Produce handler, recompression to the topic's codec and idempotent
producer id allocation."""
