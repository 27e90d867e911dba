-- OffsetFetch with require_stable asks which partitions of a group have offsets pending
-- in an ongoing transaction (storage/transactions/ txn_pending_offsets).
CREATE INDEX txn_offsets_group ON txn_offsets (group_id);
