"""AlterPartitionReassignments and ListPartitionReassignments: the reassignment half of
``controller.logic``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from kio.schema.errors import ErrorCode

from .election import change_to, desired_for
from .image import MetadataImage
from .records import Record
from .requests import OngoingReassignment, Outcome, Reassignment, ReassignmentResult

OK = ErrorCode.none


class ReassignmentAdmin:
    """Mixed into ``ControllerLogic``."""

    def alter_partition_reassignments(
        self, image: MetadataImage, requests: Sequence[Reassignment]
    ) -> Outcome[list[ReassignmentResult]]:
        """As for classic Kafka topics (no rack rule is enforced: the operator decides; the
        rack-aware metric shows the result). The replicas become target + the ones being
        removed; with no data to copy the reassignment completes as soon as every added
        replica is alive, at once if they are, else when the last of them is unfenced.
        ``replicas=None`` cancels: back to the original replicas. As in KRaft, the image
        keeps only the target order during a reassignment, so a cancel restores the original
        replica set in that order (the preferred leader may change). A classic partition's
        reassignment completes once every added replica has caught up and joined the ISR
        (``controller.classic_election``)."""
        counts = Counter((r.topic, r.partition) for r in requests)
        alive = image.alive_brokers()
        records: list[Record] = []
        results: list[ReassignmentResult] = []
        for r in requests:
            topic = image.topic(r.topic)
            p = topic.partitions.get(r.partition) if topic is not None else None
            error: tuple[ErrorCode, str] | None = None
            if counts[(r.topic, r.partition)] > 1:
                error = (ErrorCode.invalid_request, "Duplicate partition in request.")
            elif topic is None or p is None:
                error = (
                    ErrorCode.unknown_topic_or_partition,
                    f"Partition {r.topic}-{r.partition} does not exist.",
                )
            elif r.replicas is None:
                if not p.reassigning:
                    error = (
                        ErrorCode.no_reassignment_in_progress,
                        f"No reassignment is in progress for {r.topic}-{r.partition}.",
                    )
            else:
                error = self._replica_list_error(image, r.replicas)
            if error is not None or topic is None or p is None:
                results.append(ReassignmentResult(r.topic, r.partition, *(error or (OK, None))))
                continue
            original = p.original_replicas
            if r.replicas is None:
                proposed = replace(p, replicas=original, adding_replicas=(), removing_replicas=())
            else:
                target = tuple(r.replicas)
                removing = tuple(x for x in original if x not in target)
                proposed = replace(
                    p,
                    replicas=target + removing,
                    adding_replicas=tuple(x for x in target if x not in original),
                    removing_replicas=removing,
                )
            change = change_to(
                topic.topic_id, r.partition, p, desired_for(topic, r.partition, proposed, alive)
            )
            if change is not None:
                records.append(change)
            results.append(ReassignmentResult(r.topic, r.partition, OK))
        return Outcome(records, results)

    @staticmethod
    def _replica_list_error(
        image: MetadataImage, replicas: Sequence[int]
    ) -> tuple[ErrorCode, str] | None:
        code = ErrorCode.invalid_replica_assignment
        if not replicas:
            return code, "The target replica list cannot be empty."
        if len(set(replicas)) != len(replicas):
            return code, f"The target replica list {list(replicas)} has duplicates."
        unknown = [r for r in replicas if r not in image.brokers]
        if unknown:
            return code, f"The target replicas {unknown} are not registered brokers."
        return None

    def list_partition_reassignments(
        self, image: MetadataImage, topics: Mapping[str, Iterable[int]] | None = None
    ) -> list[OngoingReassignment]:
        """Reassignments in progress, of all partitions or of those asked for (unknown
        topics and partitions are skipped, as Kafka does)."""
        wanted: Iterable[tuple[str, int]]
        if topics is None:
            wanted = [(t.name, i) for t, i, _ in image.iter_partitions()]
        else:
            wanted = [(name, i) for name, parts in topics.items() for i in parts]
        out = []
        for name, index in wanted:
            topic = image.topic(name)
            p = topic.partitions.get(index) if topic is not None else None
            if p is not None and p.reassigning:
                out.append(
                    OngoingReassignment(
                        name, index, p.replicas, p.adding_replicas, p.removing_replicas
                    )
                )
        return sorted(out, key=lambda o: (o.topic, o.partition))
