"""The nemesis checker's reading of a transactional producer's librdkafka debug log: a fatal
"sequence desynchronization" is put down to the client only with the evidence of its own
sequence reuse (tests/nemesis/client_logs.py). Lines in librdkafka 2.x's format, shortened
from a CI run's log."""

from __future__ import annotations

from tests.nemesis.client_logs import Reused, classify, explain_missing, split_fatals

C = "rdkafka#producer-1"
T = "nemesis-diskless [2]"


def produce(msgid: int, seq: int, n: int = 1) -> str:
    return (
        f"%7|1.0|PRODUCE|{C}| [thrd:b/3]: b/3: {T}: Produce MessageSet with {n} message(s) "
        f"(91 bytes, ApiVersion 10, MsgVersion 2, MsgId {msgid}, BaseSeq {seq}, "
        "PID{Id:1,Epoch:0}, uncompressed)"
    )


def delivered(msgid: int, seq: int, n: int = 1) -> str:
    return (
        f"%7|1.0|MSGSET|{C}| [thrd:b/3]: b/3: {T}: MessageSet with {n} message(s) "
        f"(MsgId {msgid}, BaseSeq {seq}) delivered"
    )


def transport_error(msgid: int, seq: int) -> str:
    return (
        f"%7|1.0|MSGSET|{C}| [thrd:b/3]: b/3: {T}: MessageSet with 1 message(s) (MsgId "
        f"{msgid}, BaseSeq {seq}) encountered error: Local: Broker transport failure (actions "
        "Refresh,MsgPossiblyPersisted)"
    )


ADVBASE = (
    f"%7|1.0|ADVBASE|{C}| [thrd:app]: nemesis-diskless [2] advancing epoch base msgid to 5 "
    "due to 1 message(s) in aborted transaction"
)
NEWPID = (
    f"%7|1.0|NEWPID|{C}| [thrd:b/3]: nemesis-diskless [2] changed PID{{Id:1,Epoch:0}} -> "
    "PID{Id:1,Epoch:1} with base MsgId 286"
)
REQUEST = (
    "ProduceRequest for nemesis-diskless [2] with 3 message(s) failed due to sequence "
    "desynchronization with broker 1 (PID{Id:1,Epoch:0}, base seq 278, idemp state change "
    "67041ms ago, last partition error _TRANSPORT (actions Refresh,MsgPossiblyPersisted, base "
    "seq 278..278, base msgid 282, 1247ms ago)"
)
FATAL = f"%1|1.0|TXNERR|{C}| [thrd:b/1]: Fatal transaction error: {REQUEST} (OUT_OF_ORDER...)"


def test_a_purged_record_sent_with_an_unknown_outcome_explains_the_fatal_error() -> None:
    # seq 277 acknowledged, 278 lost in transport, purged by the abort, reused by 286
    lines = [produce(281, 277), delivered(281, 277), produce(282, 278), transport_error(282, 278)]
    lines += [ADVBASE, produce(286, 278, 3), FATAL]
    causes = classify(lines)
    assert len(causes.reused_sequences) == 1
    assert causes.unexplained == []
    ledger = [f'07:55:26 diskless-txn.1: KafkaError{{FATAL,code=45,str="{REQUEST}"}}', "other"]
    explained, rest = split_fatals(ledger, {"diskless-txn.1": causes})
    assert explained == ledger[:1]
    assert rest == ["other"]
    # the same error of another worker is not explained by this one's log
    assert split_fatals(ledger[:1], {"classic-txn.1": causes}) == ([], ledger[:1])


def test_without_a_purge_over_unacknowledged_records_the_fatal_error_counts() -> None:
    # Everything sent was acknowledged before the abort: nothing was reused.
    lines = [produce(281, 277), delivered(281, 277), ADVBASE, produce(286, 278, 3), FATAL]
    causes = classify(lines)
    assert causes.reused_sequences == []
    assert len(causes.unexplained) == 1
    fatal = f"07:55:26 diskless-txn.1: {REQUEST}"
    assert split_fatals([fatal], {"diskless-txn.1": causes}) == ([], [fatal])


def test_a_new_epoch_after_the_purge_starts_the_sequences_again() -> None:
    lines = [produce(282, 278), transport_error(282, 278), ADVBASE, NEWPID, FATAL]
    assert len(classify(lines).unexplained) == 1


def test_a_refused_batch_far_beyond_the_reused_numbers_is_not_explained() -> None:
    far = FATAL.replace("base seq 278,", "base seq 400,")
    lines = [produce(282, 278), transport_error(282, 278), ADVBASE, far]
    assert len(classify(lines).unexplained) == 1


def txn(what: str) -> str:
    return f"%7|1.0|TXNSTATE|{C}| [thrd:main]: {what}"


COMMITTED = f"%7|1.0|TXNCOMPLETE|{C}| [thrd:main]: Transaction successfully committed"
BEGIN = txn("Transaction state change Ready -> InTransaction")
REGISTERED = f"%7|1.0|ADDPARTS|{C}| [thrd:main]: nemesis-diskless [0] registered with transaction"
REFUSED = (
    f"%7|1.0|ENDTXN|{C}| [thrd:main]: EndTxn returned INVALID_TXN_STATE in state "
    "AbortingTransaction (may_retry=true)"
)
INVALID_END = (
    "Failed to end transaction: Broker: Producer attempted a transactional operation in an "
    "invalid state"
)
END_FATAL = f"%1|1.0|TXNERR|{C}| [thrd:main]: Fatal transaction error: {INVALID_END} (...)"
END_LEDGER = f"06:02:32 diskless-txn.1: KafkaError{{FATAL,code=INVALID_TXN_STATE,str={INVALID_END}"


def test_an_abort_of_a_transaction_never_registered_after_a_commit_is_the_clients() -> None:
    causes = classify([BEGIN, REGISTERED, COMMITTED, BEGIN, REFUSED, END_FATAL])
    assert causes.unregistered_aborts == 1
    assert causes.unexplained == []
    assert split_fatals([END_LEDGER], {"diskless-txn.1": causes}) == ([END_LEDGER], [])


def test_an_abort_refused_with_a_partition_registered_counts() -> None:
    # The coordinator saw this transaction: refusing its abort is the broker's error.
    causes = classify([BEGIN, REGISTERED, COMMITTED, BEGIN, REGISTERED, REFUSED, END_FATAL])
    assert causes.unregistered_aborts == 0
    assert len(causes.unexplained) == 1
    assert split_fatals([END_LEDGER], {"diskless-txn.1": causes}) == ([], [END_LEDGER])


# --- a reused batch answered as a duplicate: a committed transaction missing its records -----


def failed_in_transport(msgid: int, seq: int, n: int) -> str:
    return transport_error(msgid, seq).replace("with 1 message(s)", f"with {n} message(s)")


REUSED_THEN_DELIVERED = [
    produce(10, 12, 3),
    failed_in_transport(10, 12, 3),  # possibly written
    ADVBASE,  # purged by the abort; the next transaction's records get 12..14
    produce(13, 12, 3),
    delivered(13, 12, 3),  # answered as a duplicate of the purged batch, if it was written
]
W = "classic-txn.1"
# Ten records over three partitions: partition 2 holds records 2, 5 and 8.
MISSING_2 = [1, 1, 0, 1, 1, 0, 1, 1, 0, 1]


def test_a_delivered_request_with_reused_sequence_numbers_is_noted() -> None:
    [reused] = classify(REUSED_THEN_DELIVERED).reused_delivered
    assert reused == Reused("nemesis-diskless", 2, 3, 1, 0, 12)
    # Without the purge nothing was reused: an ordinary delivery.
    assert classify([produce(10, 12, 3), delivered(10, 12, 3)]).reused_delivered == []


def explain(
    counts: list[int], duplicated: str | None, outcomes: dict[str, str]
) -> tuple[list[str], list[str]]:
    causes = {W: classify(REUSED_THEN_DELIVERED)}
    missing = [(f"{W}/6", "nemesis-diskless", counts, 3)]
    return explain_missing(missing, causes, lambda _r: duplicated, outcomes)


def test_a_committed_transaction_missing_a_duplicated_batch_is_the_clients() -> None:
    # The partition's log holds transaction 5's batch with those sequence numbers; 5 was
    # aborted, nothing committed since: 6's batch was answered as its duplicate.
    assert explain(MISSING_2, f"{W}/5", {f"{W}/5": "aborted"}) == ([f"{W}/6"], [])
    assert explain(MISSING_2, f"{W}/4", {f"{W}/4": "unknown", f"{W}/5": "aborted"})[0]


def test_missing_records_without_that_evidence_count() -> None:
    none: tuple[list[str], list[str]] = ([], [f"{W}/6"])
    assert explain(MISSING_2, None, {}) == none  # no such batch in the log
    assert explain(MISSING_2, f"{W}/5", {f"{W}/5": "committed"}) == none
    # A committed transaction between them: the reused numbers were taken by it.
    assert explain(MISSING_2, f"{W}/4", {f"{W}/4": "aborted", f"{W}/5": "committed"}) == none
    assert explain(MISSING_2, f"{W}/7", {f"{W}/7": "aborted"}) == none  # a later one's
    assert explain(MISSING_2, "other.1/5", {"other.1/5": "aborted"}) == none
    # Only part of the partition's records missing, or another partition's.
    assert explain([1, 1, 0, 1, 1, 1, 1, 1, 0, 1], f"{W}/5", {f"{W}/5": "aborted"}) == none
    assert explain([1, 0, 1, 1, 0, 1, 1, 0, 1, 1], f"{W}/5", {f"{W}/5": "aborted"}) == none
