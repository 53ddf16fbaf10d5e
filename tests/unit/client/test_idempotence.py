"""The idempotent producer's rules: its settings, sequence numbering, ordering of retries and
what each answer of the leader means (no node needed: the accumulator is driven directly)."""

from __future__ import annotations

import asyncio
import time

import pytest
from client_test_support import TOPIC, StaticMetadata, make_producer_known, static_cluster

from brook.client.accumulator import (
    PRODUCER_STATE_TRUSTED_S,
    NeedMemory,
    PartitionQueue,
    ProducerBatch,
    RecordAccumulator,
)
from brook.client.config import producer_config
from brook.client.errors import ClientTimeoutError, ConfigError
from brook.client.idempotence import (
    SEQUENCE_MODULUS,
    IdempotenceState,
    Verdict,
    add_sequence,
    restamp,
    verdict,
)
from brook.client.metadata import ClusterView
from brook.client.runtime import Notifier, Wakeup
from brook.errors import ErrorCode
from brook.record import Compression, iter_records, read_header, validate_batches

PRODUCER_ID = 4000
GROWS = 1 << 20
EPOCH = 3
_LOOP = asyncio.new_event_loop()  # never run: Wakeup only needs a loop to post to


# -- settings -------------------------------------------------------------------------------


def test_idempotence_is_on_by_default() -> None:
    config = producer_config()

    assert config.enable_idempotence
    assert not config.idempotence_explicit


@pytest.mark.parametrize(
    "setting",
    [
        {"acks": "1"},
        {"acks": "0"},
        {"retries": 0},
        {"max.in.flight.requests.per.connection": 6},
    ],
)
def test_defaulted_idempotence_gives_way_to_explicit_conflicting_settings(
    setting: dict[str, object],
) -> None:
    assert not producer_config(setting).enable_idempotence


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"acks": "1"}, "acks=1"),
        ({"acks": "0"}, "acks=0"),
        ({"retries": 0}, "retries=0"),
        ({"max.in.flight.requests.per.connection": 6}, "max.in.flight"),
    ],
)
def test_explicit_idempotence_with_a_conflicting_setting_is_a_config_error(
    setting: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError, match=rf"enable\.idempotence=true conflicts with {named}"):
        producer_config({"enable.idempotence": True, **setting})


def test_idempotence_can_be_turned_off_with_any_acks() -> None:
    config = producer_config({"enable.idempotence": False, "acks": "1"})

    assert not config.enable_idempotence


# -- verdicts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "follows_acknowledged", "expected"),
    [
        (ErrorCode.NONE, True, Verdict.ACKNOWLEDGED),
        (ErrorCode.DUPLICATE_SEQUENCE_NUMBER, True, Verdict.ACKNOWLEDGED_OFFSETS_UNKNOWN),
        # Sent while a predecessor was unanswered: wait for it.
        (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, False, Verdict.RETRY),
        # Every predecessor was acknowledged: the leader lost the producer's state.
        (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, True, Verdict.RETRY_AFTER_EPOCH_BUMP),
        (ErrorCode.UNKNOWN_PRODUCER_ID, True, Verdict.RETRY_AFTER_EPOCH_BUMP),
        (ErrorCode.UNKNOWN_PRODUCER_ID, False, Verdict.RETRY_AFTER_EPOCH_BUMP),
        (ErrorCode.INVALID_PRODUCER_EPOCH, True, Verdict.FENCED),
        (ErrorCode.PRODUCER_FENCED, False, Verdict.FENCED),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, True, Verdict.RETRY),
        (ErrorCode.NETWORK_EXCEPTION, False, Verdict.RETRY),
        (ErrorCode.INVALID_RECORD, True, Verdict.FAIL),
    ],
)
def test_each_answer_to_a_sequenced_batch_has_kafkas_meaning(
    code: ErrorCode, follows_acknowledged: bool, expected: Verdict
) -> None:
    assert verdict(code, follows_acknowledged) is expected


def test_sequences_wrap_to_zero_after_int32_max() -> None:
    assert add_sequence(SEQUENCE_MODULUS - 1, 1) == 0
    assert add_sequence(SEQUENCE_MODULUS - 3, 5) == 2
    assert add_sequence(7, 3) == 10


# -- numbering --------------------------------------------------------------------------------


def _idempotent_accumulator(
    cluster: ClusterView,
    *,
    known: bool = True,
    in_flight_max: int = 5,
    delivery_timeout_ms: int = 120_000,
    max_request_size: int = 300,
    buffer_memory: int = 1 << 20,
) -> tuple[RecordAccumulator, IdempotenceState]:
    # max.request.size 300 leaves a batch no room to grow past batch.size (200) while it waits
    # to be sent: these tests follow batches of one record. GROWS lifts that cap.
    state = IdempotenceState()
    accumulator = RecordAccumulator(
        metadata=StaticMetadata(cluster),
        notifier=Notifier(),
        wakeup=Wakeup(_LOOP),
        batch_size=200,
        buffer_memory=buffer_memory,
        linger_ms=0,
        max_request_size=max_request_size,
        delivery_timeout_ms=delivery_timeout_ms,
        compression=Compression.NONE,
        partitioner_ignore_keys=False,
        idempotence=state,
        in_flight_max=in_flight_max,
    )
    if known:
        make_producer_known(accumulator, cluster, PRODUCER_ID, EPOCH)
    else:
        accumulator.reset_sequences(PRODUCER_ID, EPOCH)
    return accumulator, state


def _fill(accumulator: RecordAccumulator, batches: int, partition: int = 0) -> None:
    """Send records of 100 bytes: with batch.size 200 each batch holds one."""
    for i in range(batches):
        accumulator.append(TOPIC, b"%099d" % i, None, None, partition, None)


def _drain(
    accumulator: RecordAccumulator, cluster: ClusterView
) -> list[tuple[PartitionQueue, ProducerBatch]]:
    requests, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 1 << 30)
    drained = []
    for request in requests:
        for queue, batches in request.entries:
            assert len(batches) == 1, "an idempotent request carries one batch per partition"
            drained.append((queue, batches[0]))
    return drained


def test_batches_are_numbered_by_record_count_when_first_drained() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster)
    accumulator.append(TOPIC, b"a" * 50, None, None, 0, None)
    accumulator.append(TOPIC, b"b" * 50, None, None, 0, None)
    accumulator.append(TOPIC, b"c" * 150, None, None, 0, None)

    drained = _drain(accumulator, cluster)

    assert [(b.base_sequence, b.count) for _, b in drained] == [(0, 2), (2, 1)]
    for _, batch in drained:
        (header,) = validate_batches(batch.seal(accumulator.compression), max_batch_bytes=1 << 20)
        assert (header.producer_id, header.producer_epoch) == (PRODUCER_ID, EPOCH)
        assert header.base_sequence == batch.base_sequence


def test_numbering_wraps_at_int32_max() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster)
    _fill(accumulator, 1)
    [(queue, first)] = _drain(accumulator, cluster)
    accumulator.complete(queue, [first], 0, -1)
    # As if 2^31 - 1 records had been sent before.
    queue.next_sequence = SEQUENCE_MODULUS - 1
    _fill(accumulator, 2)

    drained = _drain(accumulator, cluster)

    assert [b.base_sequence for _, b in drained] == [SEQUENCE_MODULUS - 1, 0]


def test_at_most_in_flight_max_batches_of_a_partition_are_unacknowledged() -> None:
    cluster = static_cluster(2)
    accumulator, _ = _idempotent_accumulator(cluster, in_flight_max=5)
    _fill(accumulator, 8, partition=0)
    _fill(accumulator, 2, partition=1)

    drained = _drain(accumulator, cluster)

    per_partition = [q.partition for q, _ in drained]
    assert per_partition.count(0) == 5
    assert per_partition.count(1) == 2
    assert _drain(accumulator, cluster) == []
    first_queue, first = next((q, b) for q, b in drained if q.partition == 0)
    accumulator.complete(first_queue, [first], 0, -1)
    assert [b.base_sequence for _, b in _drain(accumulator, cluster)] == [5]


def test_new_batches_stay_within_the_window_the_leader_can_deduplicate() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster, in_flight_max=5)
    _fill(accumulator, 7)
    (q, b0), *later = _drain(accumulator, cluster)
    for _, batch in later:
        accumulator.complete(q, [batch], 0, -1)

    # b1..b4 are acknowledged but b0 is not: a sixth batch would take b0 out of the leader's
    # memory of five, and b0's retry could no longer be recognised as a duplicate.
    assert _drain(accumulator, cluster) == []
    accumulator.complete(q, [b0], 0, -1)
    assert [b.base_sequence for _, b in _drain(accumulator, cluster)] == [5, 6]


def test_a_retried_batch_waits_for_its_predecessors_and_keeps_its_sequence() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster)
    _fill(accumulator, 4)
    (q, b0), (_, b1), (_, b2), (_, b3) = _drain(accumulator, cluster)
    assert [b.follows_acknowledged for b in (b0, b1, b2, b3)] == [True, False, False, False]

    # b1 fails retriably while b0 is still unanswered, b2 and b3 bounce out of order.
    accumulator.requeue(q, [b2], 0.0)
    accumulator.requeue(q, [b1], 0.0)
    accumulator.requeue(q, [b3], 0.0)
    assert list(q.batches) == [b1, b2, b3], "retries go back in sequence order"
    assert _drain(accumulator, cluster) == [], "b1 may not overtake the unanswered b0"

    accumulator.complete(q, [b0], 0, -1)
    assert [b for _, b in _drain(accumulator, cluster)] == [b1]
    assert b1.follows_acknowledged
    assert _drain(accumulator, cluster) == [], "b2 waits for b1's answer"
    accumulator.complete(q, [b1], 1, -1)
    assert [b for _, b in _drain(accumulator, cluster)] == [b2]

    assert [b.base_sequence for b in (b0, b1, b2, b3)] == [0, 1, 2, 3]


def test_new_batches_queue_behind_retries() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster)
    _fill(accumulator, 1)
    [(q, b0)] = _drain(accumulator, cluster)
    _fill(accumulator, 1)
    accumulator.requeue(q, [b0], 0.0)

    drained = [b for _, b in _drain(accumulator, cluster)]

    assert drained[0] is b0
    assert [b.base_sequence for b in drained] == [0, 1]


def test_until_the_leader_knows_the_producer_a_partition_sends_one_batch_at_a_time() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster, known=False)
    _fill(accumulator, 3)

    # The leader takes an unknown producer's first batch at any sequence: had b1 been sent
    # beside b0 and b0 been refused, b1 would be in the log ahead of b0's records.
    [(q, b0)] = _drain(accumulator, cluster)
    assert _drain(accumulator, cluster) == []
    accumulator.requeue(q, [b0], 0.0)
    [(_, retried)] = _drain(accumulator, cluster)
    assert retried is b0
    assert _drain(accumulator, cluster) == []

    accumulator.complete(q, [b0], 0, -1)
    assert [b.base_sequence for _, b in _drain(accumulator, cluster)] == [1, 2]

    # An epoch bump keeps the producer known (a known producer's new epoch must start at 0)...
    _complete_all(accumulator, q)
    accumulator.reset_sequences(PRODUCER_ID, EPOCH + 1)
    _fill(accumulator, 2)
    assert [b.base_sequence for _, b in _drain(accumulator, cluster)] == [0, 1]
    # ... a new producer id does not.
    _complete_all(accumulator, q)
    accumulator.reset_sequences(PRODUCER_ID + 1, 0)
    _fill(accumulator, 2)
    assert [b.base_sequence for _, b in _drain(accumulator, cluster)] == [0]


def test_a_partition_starts_over_once_its_leader_may_have_forgotten_the_producer() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster)
    _fill(accumulator, 2)
    (q, _), _ = _drain(accumulator, cluster)
    _complete_all(accumulator, q)

    # Idle past what the leader is trusted to remember (producer.id.expiration.ms)...
    q.last_appended -= PRODUCER_STATE_TRUSTED_S + 1
    _fill(accumulator, 2)
    assert len(_drain(accumulator, cluster)) == 1
    _complete_all(accumulator, q)
    _fill(accumulator, 2)
    assert len(_drain(accumulator, cluster)) == 3, "an append makes it known again"
    _complete_all(accumulator, q)

    # ... or told that it lost the producer's state.
    accumulator.producer_unknown(q)
    _fill(accumulator, 2)
    assert len(_drain(accumulator, cluster)) == 1


def _complete_all(accumulator: RecordAccumulator, queue: PartitionQueue) -> None:
    for batch in list(queue.in_flight):
        accumulator.complete(queue, [batch], 0, -1)


def test_an_epoch_bump_waits_for_retries_of_unknown_outcome_and_renumbers_only_unwritten_ones() -> (
    None
):
    cluster = static_cluster(2)
    accumulator, state = _idempotent_accumulator(cluster)
    _fill(accumulator, 2, partition=0)
    _fill(accumulator, 1, partition=1)
    drained = _drain(accumulator, cluster)
    (q0, a0), (_, a1) = [d for d in drained if d[0].partition == 0]
    [(q1, c0)] = [d for d in drained if d[0].partition == 1]
    # Partition 0's leader lost the producer's state: a0 is not in its log, nor a1 behind it.
    a0.unwritten = True
    state.request_epoch_bump("UNKNOWN_PRODUCER_ID")
    accumulator.requeue(q0, [a0], 0.0)
    accumulator.requeue(q0, [a1], 0.0)
    # c0's answer was lost with its connection: it may be in partition 1's log.
    accumulator.requeue(q1, [c0], 0.0)
    _fill(accumulator, 1, partition=0)

    assert not accumulator.ready_for_epoch_bump()
    [(_, resent)] = _drain(accumulator, cluster)
    assert resent is c0, "only the retry of unknown outcome goes out, under the old epoch"
    assert (c0.producer_epoch, c0.base_sequence) == (EPOCH, 0)
    assert not accumulator.ready_for_epoch_bump(), "c0 is in flight"
    accumulator.complete(q1, [c0], 7, -1)
    assert accumulator.ready_for_epoch_bump()

    accumulator.reset_sequences(PRODUCER_ID, EPOCH + 1)

    after = [b for _, b in _drain(accumulator, cluster)]
    assert after == [a0]
    assert (a0.producer_epoch, a0.base_sequence) == (EPOCH + 1, 0)
    (header,) = validate_batches(a0.seal(accumulator.compression), max_batch_bytes=1 << 20)
    assert (header.producer_epoch, header.base_sequence) == (EPOCH + 1, 0)
    accumulator.complete(q0, [a0], 0, -1)
    (_, renumbered), (_, new) = _drain(accumulator, cluster)
    assert renumbered is a1
    assert [(b.base_sequence, b.producer_epoch) for b in (a1, new)] == [
        (1, EPOCH + 1),
        (2, EPOCH + 1),
    ]


def test_a_finally_failed_batch_requests_no_bump_by_itself() -> None:
    # Whether it is in the log is unknown; the next batch's answer tells (appended, or out of
    # order with every predecessor answered, which then bumps the epoch).
    cluster = static_cluster(1)
    accumulator, state = _idempotent_accumulator(cluster, delivery_timeout_ms=1)
    _fill(accumulator, 1)
    [(q, b0)] = _drain(accumulator, cluster)
    accumulator.requeue(q, [b0], 0.0)

    accumulator.expire(b0.deadline + 1)

    assert isinstance(b0.error, ClientTimeoutError)
    assert not state.bump_reason
    _fill(accumulator, 1)
    [(_, b1)] = _drain(accumulator, cluster)
    assert (b1.base_sequence, b1.follows_acknowledged) == (1, True)


def test_fatal_error_makes_send_raise() -> None:
    cluster = static_cluster(1)
    accumulator, state = _idempotent_accumulator(cluster)
    fenced = state.fence(f"{TOPIC}-0", ErrorCode.INVALID_PRODUCER_EPOCH, "epoch 3 < 4")

    with pytest.raises(type(fenced), match="fenced"):
        accumulator.append(TOPIC, b"v", None, None, 0, None)
    assert _drain(accumulator, cluster) == []


# -- batches waiting to be sent -----------------------------------------------------------------


def _fill_window(
    accumulator: RecordAccumulator, cluster: ClusterView
) -> tuple[PartitionQueue, list[ProducerBatch]]:
    """Five one-record batches of partition 0 in flight: its window is full."""
    drained = []
    for _ in range(5):
        _fill(accumulator, 1)
        drained += _drain(accumulator, cluster)
    assert len(drained) == 5
    return drained[0][0], [batch for _, batch in drained]


def _late_values(count: int) -> list[bytes]:
    return [b"late-%094d" % i for i in range(count)]


def test_a_batch_waiting_for_a_full_window_grows_and_goes_out_as_one_batch_in_order() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster, max_request_size=GROWS)
    queue, in_flight = _fill_window(accumulator, cluster)
    values = _late_values(20)
    for value in values:  # each alone fills batch.size (200 bytes)
        accumulator.append(TOPIC, value, None, None, 0, None)
    assert _drain(accumulator, cluster) == [], "the window is full"

    accumulator.complete(queue, [in_flight[0]], 0, -1)
    [(_, grown)] = _drain(accumulator, cluster)

    assert (grown.base_sequence, grown.count) == (5, 20)
    assert [batch.count for batch in in_flight] == [1] * 5, "sent batches never take records"
    payload = grown.seal(accumulator.compression)
    (header,) = validate_batches(payload, max_batch_bytes=1 << 20)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        PRODUCER_ID,
        EPOCH,
        5,
    )
    assert [record.value for record in iter_records(payload)] == values
    for batch in in_flight[1:]:
        accumulator.complete(queue, [batch], 0, -1)
    accumulator.complete(queue, [grown], 5, -1)
    assert accumulator.has_free_bytes(1 << 20), "a grown batch gives back all it reserved"


def test_a_batch_waiting_for_a_request_slot_of_its_node_grows_until_it_is_drained() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster, max_request_size=GROWS)
    values = _late_values(10)
    accumulator.append(TOPIC, values[0], None, None, 0, None)
    # The node already has max.in.flight.requests.per.connection requests in flight.
    requests, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 0)
    assert requests == []
    for value in values[1:]:
        accumulator.append(TOPIC, value, None, None, 0, None)

    [(_, grown)] = _drain(accumulator, cluster)
    _fill(accumulator, 1)
    [(_, later)] = _drain(accumulator, cluster)

    assert (grown.base_sequence, grown.count) == (0, 10)
    assert [record.value for record in iter_records(grown.seal(Compression.NONE))] == values
    assert (later.base_sequence, later.count) == (10, 1), "a drained batch takes no records"


def test_a_waiting_batch_grows_no_larger_than_max_request_size() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster, max_request_size=1000)
    queue, in_flight = _fill_window(accumulator, cluster)
    values = _late_values(30)
    for value in values:
        accumulator.append(TOPIC, value, None, None, 0, None)

    for batch in in_flight:
        accumulator.complete(queue, [batch], 0, -1)
    later = [batch for _, batch in _drain(accumulator, cluster)]

    payloads = [batch.seal(accumulator.compression) for batch in later]
    assert all(len(payload) <= 1000 for payload in payloads)
    assert len(later) < len(values), "the batches grew past batch.size"
    assert [batch.base_sequence for batch in later] == [
        5 + sum(batch.count for batch in later[:index]) for index in range(len(later))
    ]
    assert [r.value for payload in payloads for r in iter_records(payload)] == values


def test_a_waiting_batch_grows_only_within_buffer_memory() -> None:
    cluster = static_cluster(1)
    # Five in-flight batches and one waiting reserve 200 bytes each: nothing is left.
    accumulator, _ = _idempotent_accumulator(cluster, max_request_size=GROWS, buffer_memory=1200)
    _fill_window(accumulator, cluster)
    accumulator.append(TOPIC, _late_values(1)[0], None, None, 0, None)

    with pytest.raises(NeedMemory):
        accumulator.append(TOPIC, _late_values(2)[1], None, None, 0, None)


def test_a_record_does_not_join_a_batch_with_less_than_half_its_delivery_timeout_left() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(
        cluster, max_request_size=GROWS, delivery_timeout_ms=200
    )
    first, second = _late_values(2)
    accumulator.append(TOPIC, first, None, None, 0, None)
    time.sleep(0.15)  # past half of the 200 ms, well before the batch expires
    accumulator.append(TOPIC, second, None, None, 0, None)

    drained = [batch for _, batch in _drain(accumulator, cluster)]

    assert [batch.count for batch in drained] == [1, 1]


# -- restamping -------------------------------------------------------------------------------


def test_restamp_changes_the_producer_fields_and_keeps_the_crc_valid() -> None:
    cluster = static_cluster(1)
    accumulator, _ = _idempotent_accumulator(cluster)
    accumulator.append(TOPIC, b"value", b"key", [("h", b"x")], 0, None)
    [(_, batch)] = _drain(accumulator, cluster)
    original = batch.seal(accumulator.compression)

    restamped = restamp(original, 77, 9, 1234)

    (header,) = validate_batches(restamped, max_batch_bytes=1 << 20)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 9, 1234)
    assert [(r.key, r.value) for r in iter_records(restamped)] == [(b"key", b"value")]
    assert len(restamped) == len(original)
    assert read_header(original).crc != header.crc


def test_restamp_refuses_a_buffer_without_a_header() -> None:
    with pytest.raises(ValueError, match="no record batch header"):
        restamp(b"\x00" * 10, 1, 0, 0)
