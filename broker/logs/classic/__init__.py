"""The classic engine: local logs replicated leader -> followers (ISR, high watermark, as
Kafka), their producer state and transaction markers, and ``ClassicLog`` (``classic_log``)."""
