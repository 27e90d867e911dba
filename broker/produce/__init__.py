"""The write path: the Produce handler and recompression to the topic's codec."""
