"""A partition's logs as handlers see them: one interface (``partition_log``, with the fetch
slots and budget it reads into, ``fetch_slots``) implemented by the diskless engine
(``diskless/``) and the classic one (``classic/``) with its tiered part (``tiered/``), the
one module that decides which of them serves a call (``router``), and the migration
between them (``migration/``)."""
