"""The diskless engine: the appender that batches produce requests into shared objects
(``diskless_append``) and the partition log over the batch coordinator (``diskless_log``)."""
