"""The classic engine: local logs replicated leader -> followers (ISR, high watermark, as
Kafka), their producer state and transaction markers, and ``ClassicLog`` (``classic_log``).
What the engine uses of its tiered part (``broker.logs.tiered``, above it) is defined here:
``tiered_part.Tiering`` and the replica's ``remote_view``."""
