"""The identity of one partition's log, as every store keys it (batch coordinator,
transactions, group offsets): a module of its own so the interfaces that share it do not
import each other."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True, slots=True)
class PartitionKey:
    topic_id: UUID
    partition: int
