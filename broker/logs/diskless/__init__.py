"""The diskless engine: the appender that batches produce requests into shared objects
(``diskless_append``), the reader of their batches through the block cache
(``diskless_read``) and the partition log over the batch coordinator (``diskless_log``)."""
