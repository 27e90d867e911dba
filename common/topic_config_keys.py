"""Every topic config Apache Kafka 4.x defines, as Sluice knows it: type, default, valid
values, the broker configs Kafka treats as its synonyms, and our own description.

The rules live in ``topic_config_validation``; this module is the table. ``applies`` says
whether Sluice acts on a key: the others are accepted, validated and stored (so provisioning
tools and migrations work unchanged) but mean nothing for a diskless topic, which has no
local segments, indexes, followers or tiered copy — the description says so.
"""

from __future__ import annotations

from dataclasses import dataclass

# DescribeConfigs config types (KIP-569).
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = 1, 2, 3, 4, 5, 6, 7, 8, 9

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_NO_EFFECT = " No effect on diskless topics: {why}"
_NO_SEGMENTS = "Sluice writes no local log segments or indexes (data lives in object storage)."
_NO_FOLLOWERS = "there is no follower replication (every broker reads the shared storage)."


@dataclass(frozen=True)
class Key:
    name: str
    type: int
    default: str
    doc: str
    applies: bool = True
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    # Broker configs that set this key's cluster-wide default, most specific first, with
    # the factor from their unit to the key's (log.retention.hours -> ms: 3_600_000).
    synonyms: tuple[tuple[str, int], ...] = ()
    # Kafka's built-in default named after the broker config that carries it
    # (log.retention.hours=168), shown as the DEFAULT_CONFIG synonym.
    broker_default: tuple[str, str] | None = None
    # Not one of Kafka 4.4's topic configs (accepted for a reason its description gives):
    # DescribeConfigs lists it only on a topic that sets it, as Kafka lists only its own.
    extra: bool = False


def _key(name: str, type_: int, default: str, doc: str, **kw: object) -> Key:
    return Key(name, type_, default, doc, **kw)  # type: ignore[arg-type]


def _inert(doc: str, why: str) -> str:
    return doc + _NO_EFFECT.format(why=why)


KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        _key(
            "cleanup.policy",
            LIST,
            "delete",
            "'delete' removes old batches by retention.ms / retention.bytes; 'compact' keeps "
            "the newest record per key when `sluice jobs compact` runs; both may be combined.",
            choices=("compact", "delete"),
            synonyms=(("log.cleanup.policy", 1),),
            broker_default=("log.cleanup.policy", "delete"),
        ),
        _key(
            "compression.type",
            STRING,
            "producer",
            "Codec the topic's batches are stored in: batches produced in another codec "
            "are recompressed by the broker; 'producer' keeps each batch as produced.",
            choices=COMPRESSION_TYPES,
            synonyms=(("compression.type", 1),),
            broker_default=("compression.type", "producer"),
        ),
        _key(
            "compression.gzip.level",
            INT,
            "-1",
            "gzip level (1-9, -1: the codec's default) used when compression.type=gzip.",
            synonyms=(("compression.gzip.level", 1),),
            broker_default=("compression.gzip.level", "-1"),
        ),
        _key(
            "compression.lz4.level",
            INT,
            "9",
            "lz4 level (1-17) used when compression.type=lz4.",
            minimum=1,
            maximum=17,
            synonyms=(("compression.lz4.level", 1),),
            broker_default=("compression.lz4.level", "9"),
        ),
        _key(
            "compression.zstd.level",
            INT,
            "3",
            "zstd level (-131072 to 22) used when compression.type=zstd.",
            minimum=-131072,
            maximum=22,
            synonyms=(("compression.zstd.level", 1),),
            broker_default=("compression.zstd.level", "3"),
        ),
        _key(
            "delete.retention.ms",
            LONG,
            "86400000",
            "How long `sluice jobs compact` keeps tombstones (null values) of compacted topics.",
            minimum=0,
            synonyms=(("log.cleaner.delete.retention.ms", 1),),
            broker_default=("log.cleaner.delete.retention.ms", "86400000"),
        ),
        _key(
            "file.delete.delay.ms",
            LONG,
            "60000",
            _inert(
                "Delay before a deleted segment file is removed.",
                "objects hold many partitions and are removed after the broker's "
                "file.delete.delay.ms.",
            ),
            applies=False,
            minimum=0,
            synonyms=(("log.segment.delete.delay.ms", 1),),
            broker_default=("log.segment.delete.delay.ms", "60000"),
        ),
        _key(
            "flush.messages",
            LONG,
            str(LONG_MAX),
            _inert(
                "Records written before a forced fsync of the log.",
                "an acknowledged batch is already durable in object storage.",
            ),
            applies=False,
            minimum=1,
            synonyms=(("log.flush.interval.messages", 1),),
            broker_default=("log.flush.interval.messages", str(LONG_MAX)),
        ),
        _key(
            "flush.ms",
            LONG,
            str(LONG_MAX),
            _inert(
                "Time between forced fsyncs of the log.",
                "an acknowledged batch is already durable in object storage.",
            ),
            applies=False,
            minimum=0,
            synonyms=(("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
            broker_default=("log.flush.scheduler.interval.ms", str(LONG_MAX)),
        ),
        _key(
            "follower.replication.throttled.replicas",
            LIST,
            "",
            _inert(
                "Replicas ('partition:broker' pairs, or '*') whose follower fetching is throttled.",
                _NO_FOLLOWERS,
            ),
            applies=False,
        ),
        _key(
            "index.interval.bytes",
            INT,
            "4096",
            _inert("Bytes between offset index entries.", _NO_SEGMENTS),
            applies=False,
            minimum=0,
            synonyms=(("log.index.interval.bytes", 1),),
            broker_default=("log.index.interval.bytes", "4096"),
        ),
        _key(
            "leader.replication.throttled.replicas",
            LIST,
            "",
            _inert(
                "Replicas ('partition:broker' pairs, or '*') whose leader-side replication is "
                "throttled.",
                _NO_FOLLOWERS,
            ),
            applies=False,
        ),
        _key(
            "local.retention.bytes",
            LONG,
            "-2",
            _inert(
                "Bytes kept on local disk before tiered storage only (-2: retention.bytes).",
                "there is no local tier.",
            ),
            applies=False,
            minimum=-2,
            synonyms=(("log.local.retention.bytes", 1),),
            broker_default=("log.local.retention.bytes", "-2"),
        ),
        _key(
            "local.retention.ms",
            LONG,
            "-2",
            _inert(
                "Time kept on local disk before tiered storage only (-2: retention.ms).",
                "there is no local tier.",
            ),
            applies=False,
            minimum=-2,
            synonyms=(("log.local.retention.ms", 1),),
            broker_default=("log.local.retention.ms", "-2"),
        ),
        _key(
            "max.compaction.lag.ms",
            LONG,
            str(LONG_MAX),
            _inert(
                "Longest a record may stay uncompacted.",
                "compaction runs when `sluice jobs compact` is scheduled.",
            ),
            applies=False,
            minimum=1,
            synonyms=(("log.cleaner.max.compaction.lag.ms", 1),),
            broker_default=("log.cleaner.max.compaction.lag.ms", str(LONG_MAX)),
        ),
        _key(
            # Kafka 4.x (share groups' dead-letter queue): accepted and stored.
            "errors.deadletterqueue.group.enable",
            BOOLEAN,
            "false",
            "Whether share groups may use this topic as a dead-letter queue. Not acted on: "
            "Sluice has no share groups yet.",
            applies=False,
        ),
        _key(
            # Kafka 4.x: the bound on a batch's size once decompressed.
            "max.decompressed.message.bytes",
            INT,
            "2147483639",
            "Largest size a record batch may have once decompressed. Not enforced yet: "
            "Sluice bounds what it decompresses by max.message.bytes times the codec's "
            "ratio limit.",
            applies=False,
            minimum=0,
            synonyms=(("max.decompressed.message.bytes", 1),),
            broker_default=("max.decompressed.message.bytes", "2147483639"),
        ),
        _key(
            "max.message.bytes",
            INT,
            "1048588",
            "Largest record batch Produce accepts for this topic, in bytes.",
            minimum=0,
            synonyms=(("message.max.bytes", 1),),
            broker_default=("message.max.bytes", "1048588"),
        ),
        _key(
            "message.timestamp.after.max.ms",
            LONG,
            "3600000",
            "How far past the broker's clock a CreateTime batch timestamp may be; later ones "
            "are refused with INVALID_TIMESTAMP.",
            minimum=0,
            synonyms=(("log.message.timestamp.after.max.ms", 1),),
            broker_default=("log.message.timestamp.after.max.ms", "3600000"),
        ),
        _key(
            "message.timestamp.before.max.ms",
            LONG,
            str(LONG_MAX),
            "How far behind the broker's clock a CreateTime batch timestamp may be; older ones "
            "are refused with INVALID_TIMESTAMP.",
            minimum=0,
            synonyms=(("log.message.timestamp.before.max.ms", 1),),
            broker_default=("log.message.timestamp.before.max.ms", str(LONG_MAX)),
        ),
        _key(
            # Removed from Kafka 4.0 in favour of the two above; still accepted because
            # topics and provisioning scripts from Kafka 3.x carry it.
            "message.timestamp.difference.max.ms",
            LONG,
            str(LONG_MAX),
            "Deprecated bound on |timestamp - broker clock| for CreateTime batches; "
            "message.timestamp.before.max.ms / after.max.ms replace it.",
            minimum=0,
            synonyms=(("log.message.timestamp.difference.max.ms", 1),),
            broker_default=("log.message.timestamp.difference.max.ms", str(LONG_MAX)),
            extra=True,
        ),
        _key(
            "message.timestamp.type",
            STRING,
            "CreateTime",
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with "
            "the broker's time when it is appended.",
            choices=("CreateTime", "LogAppendTime"),
            synonyms=(("log.message.timestamp.type", 1),),
            broker_default=("log.message.timestamp.type", "CreateTime"),
        ),
        _key(
            "min.cleanable.dirty.ratio",
            DOUBLE,
            "0.5",
            _inert(
                "Share of uncompacted log that makes the cleaner compact a partition.",
                "compaction runs when `sluice jobs compact` is scheduled.",
            ),
            applies=False,
            minimum=0,
            maximum=1,
            synonyms=(("log.cleaner.min.cleanable.ratio", 1),),
            broker_default=("log.cleaner.min.cleanable.ratio", "0.5"),
        ),
        _key(
            "min.compaction.lag.ms",
            LONG,
            "0",
            "Records younger than this are left alone by `sluice jobs compact`.",
            minimum=0,
            synonyms=(("log.cleaner.min.compaction.lag.ms", 1),),
            broker_default=("log.cleaner.min.compaction.lag.ms", "0"),
        ),
        _key(
            "min.insync.replicas",
            INT,
            "1",
            _inert(
                "Replicas that must have a batch before acks=all is answered.",
                "an acknowledged batch is committed to object storage and the coordinator, "
                "which every broker reads.",
            ),
            applies=False,
            minimum=1,
            synonyms=(("min.insync.replicas", 1),),
            broker_default=("min.insync.replicas", "1"),
        ),
        _key(
            "preallocate",
            BOOLEAN,
            "false",
            _inert("Preallocate segment files on disk.", _NO_SEGMENTS),
            applies=False,
            synonyms=(("log.preallocate", 1),),
            broker_default=("log.preallocate", "false"),
        ),
        _key(
            # remote.copy.lag.*: the newest 4.x tiered-storage keys (copy delay after roll).
            "remote.copy.lag.bytes",
            LONG,
            "-1",
            _inert(
                "Bytes a segment waits before it is copied to tiered storage (-1: the "
                "broker's log.remote.copy.lag.bytes). Not acted on: Sluice copies a classic "
                "topic's segments once they are rolled.",
                "there is no tiered storage.",
            ),
            applies=False,
            minimum=-1,
            synonyms=(("log.remote.copy.lag.bytes", 1),),
            broker_default=("log.remote.copy.lag.bytes", "-1"),
        ),
        _key(
            "remote.copy.lag.ms",
            LONG,
            "0",
            _inert(
                "Time a segment waits before it is copied to tiered storage. Not acted on: "
                "Sluice copies a classic topic's segments once they are rolled.",
                "there is no tiered storage.",
            ),
            applies=False,
            minimum=-1,
            synonyms=(("log.remote.copy.lag.ms", 1),),
            broker_default=("log.remote.copy.lag.ms", "0"),
        ),
        _key(
            "remote.log.copy.disable",
            BOOLEAN,
            "false",
            _inert("Stop copying segments to tiered storage.", "there is no tiered storage."),
            applies=False,
        ),
        _key(
            "remote.log.delete.on.disable",
            BOOLEAN,
            "false",
            _inert(
                "Delete the tiered copy when tiered storage is turned off.",
                "there is no tiered storage.",
            ),
            applies=False,
        ),
        _key(
            # KIP-950's spelling (Kafka 3.9 shipped remote.log.delete.on.disable instead).
            "remote.log.disable.policy",
            STRING,
            "retain",
            _inert(
                "What remote.storage.enable=false does to a classic topic's tiered copy: "
                "'retain' keeps it readable until retention removes it, 'delete' deletes it.",
                "there is no tiered storage.",
            ),
            applies=False,
            choices=("retain", "delete"),
            # Seed 004 (KIP-950) names it; Kafka 4.4 shipped remote.log.delete.on.disable.
            extra=True,
        ),
        _key(
            "remote.storage.enable",
            BOOLEAN,
            "false",
            "Tiered storage of a classic topic (diskless.enable=false): the leader copies "
            "rolled segments to the object store. Refused on diskless topics, which already "
            "live in object storage.",
            applies=False,
        ),
        _key(
            "retention.bytes",
            LONG,
            "-1",
            "Oldest batches are deleted while a partition holds more than this; -1: no limit.",
            synonyms=(("log.retention.bytes", 1),),
            broker_default=("log.retention.bytes", "-1"),
        ),
        _key(
            "retention.ms",
            LONG,
            "604800000",
            "Batches older than this are deleted (whole batches); -1 keeps them forever.",
            minimum=-1,
            synonyms=(
                ("log.retention.ms", 1),
                ("log.retention.minutes", 60_000),
                ("log.retention.hours", 3_600_000),
            ),
            broker_default=("log.retention.hours", "168"),
        ),
        _key(
            "segment.bytes",
            INT,
            "1073741824",
            _inert("Size of one log segment file.", _NO_SEGMENTS),
            applies=False,
            minimum=1024 * 1024,
            synonyms=(("log.segment.bytes", 1),),
            broker_default=("log.segment.bytes", "1073741824"),
        ),
        _key(
            "segment.index.bytes",
            INT,
            "10485760",
            _inert("Size of one segment's offset index.", _NO_SEGMENTS),
            applies=False,
            minimum=4,
            synonyms=(("log.index.size.max.bytes", 1),),
            broker_default=("log.index.size.max.bytes", "10485760"),
        ),
        _key(
            "segment.jitter.ms",
            LONG,
            "0",
            _inert("Random jitter subtracted from segment.ms.", _NO_SEGMENTS),
            applies=False,
            minimum=0,
            synonyms=(("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
            broker_default=("log.roll.jitter.hours", "0"),
        ),
        _key(
            "segment.ms",
            LONG,
            "604800000",
            _inert("Time after which a new log segment is rolled.", _NO_SEGMENTS),
            applies=False,
            minimum=1,
            synonyms=(("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
            broker_default=("log.roll.hours", "168"),
        ),
        _key(
            "unclean.leader.election.enable",
            BOOLEAN,
            "false",
            _inert(
                "Let an out-of-sync replica become leader.",
                "any broker serves any partition from the shared storage, so no data is "
                "lost when leadership moves.",
            ),
            applies=False,
            synonyms=(("unclean.leader.election.enable", 1),),
            broker_default=("unclean.leader.election.enable", "false"),
        ),
        _key(
            # Sluice's own (Inkless' name): false makes a classic topic (local logs,
            # leader-follower replication; needs controller mode). Changing it on an
            # existing topic migrates it (controller/migration.py).
            "diskless.enable",
            BOOLEAN,
            "true",
            "true: data in object storage (diskless); false: a classic topic with local logs "
            "replicated leader to followers (controller mode). Changing it migrates the topic "
            "(progress in diskless.migration.state).",
        ),
    )
}

# Throttled-replica lists ('*' or 'partition:broker' pairs) are checked by shape.
THROTTLED_REPLICA_KEYS = frozenset(
    {"follower.replication.throttled.replicas", "leader.replication.throttled.replicas"}
)
