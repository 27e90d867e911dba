-- Share groups' membership (KIP-932): one row per group with its epochs, members and their
-- assignments as JSON (broker/groups/share/persistence.py), replaced whole on every change,
-- so a broker that becomes the group's coordinator goes on with the same members (Kafka's
-- ShareGroupMetadata, member and assignment records in __consumer_offsets).

CREATE TABLE share_groups (
    group_id text PRIMARY KEY,
    membership text NOT NULL
);
