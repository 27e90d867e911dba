"""A partition's logs as handlers see them: one interface (``partition_log``) implemented by
the diskless engine (``diskless``) and the classic one with its tiered part (``classic``),
and the one module that decides which of them serves a call (``router``)."""
