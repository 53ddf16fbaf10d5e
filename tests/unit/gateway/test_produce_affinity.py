"""The gateway's ProduceAffinity: a connection's pipelined Produce requests for a partition
fail and succeed as they would on a Kafka broker serving them one at a time (issue #13: a
request routed past a refused one reached the new leader as a sequence gap, and librdkafka
answered that by bumping its epoch and sending unacknowledged batches again)."""

from __future__ import annotations

from brook_gateway.produce import REFUSAL_HOLD_MS, ProduceAffinity

from brook.errors import ErrorCode
from brook.record import build_batch

PEER = "127.0.0.1:5000"
OTHER_PEER = "127.0.0.1:5001"


def _batch(sequence: int, *, producer_id: int = 7, epoch: int = 0) -> bytes:
    return build_batch(
        [(0, None, b"v", ())], producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )


class _Clock:
    def __init__(self) -> None:
        self.now_s = 10.0

    def __call__(self) -> float:
        return self.now_s


def test_a_partition_follows_its_in_flight_requests_to_their_node_until_they_are_answered() -> None:
    affinity = ProduceAffinity()
    first = ("t", 0, _batch(0))
    affinity.enter(PEER, "node-1:9101", [first])
    affinity.enter(PEER, "node-1:9101", [("t", 0, _batch(1))])
    # The metadata moved the leadership to node 2: the partition still goes to node 1.
    assert affinity.pinned(PEER, "t", 0, "node-2:9101") == "node-1:9101"
    assert affinity.pinned(PEER, "t", 0, None) == "node-1:9101"
    assert affinity.pinned(PEER, "t", 0, "node-1:9101") is None  # no override needed
    assert affinity.pinned(PEER, "t", 1, "node-2:9101") is None
    assert affinity.pinned(OTHER_PEER, "t", 0, "node-2:9101") is None
    affinity.leave(PEER, [first])
    assert affinity.pinned(PEER, "t", 0, "node-2:9101") == "node-1:9101"
    affinity.leave(PEER, [("t", 0, _batch(1))])
    assert affinity.pinned(PEER, "t", 0, "node-2:9101") is None and affinity.pins == 0


def test_a_pin_to_a_node_the_metadata_no_longer_names_lasts_the_hold_at_most() -> None:
    clock = _Clock()
    affinity = ProduceAffinity(clock_s=clock)
    affinity.enter(PEER, "node-1:9101", [("t", 0, _batch(0))])
    assert affinity.pinned(PEER, "t", 0, "node-2:9101") == "node-1:9101"
    clock.now_s += REFUSAL_HOLD_MS / 1000 + 0.001
    assert affinity.pinned(PEER, "t", 0, "node-2:9101") is None  # node 1 may hang: move on


def test_requests_pipelined_behind_a_refused_batch_are_refused_until_its_retry_arrives() -> None:
    affinity = ProduceAffinity()
    affinity.refused(PEER, ("t", 0, _batch(416)), ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    behind = affinity.refusal(PEER, ("t", 0, _batch(417)))
    assert behind is not None and behind.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert affinity.refusal(PEER, ("t", 1, _batch(417))) is None  # another partition
    assert affinity.refusal(OTHER_PEER, ("t", 0, _batch(417))) is None  # another connection
    # The client's retry starts at the refused batch: it goes through, and so does the rest.
    assert affinity.refusal(PEER, ("t", 0, _batch(416))) is None
    assert affinity.refusal(PEER, ("t", 0, _batch(417))) is None
    assert affinity.refusals == 0


def test_a_new_producer_epoch_ends_the_refusal() -> None:
    affinity = ProduceAffinity()
    affinity.refused(PEER, ("t", 0, _batch(416)), ErrorCode.NOT_ENOUGH_REPLICAS, "isr")
    assert affinity.refusal(PEER, ("t", 0, _batch(0, epoch=1))) is None
    assert affinity.refusals == 0


def test_answers_that_may_have_appended_refuse_nothing_later() -> None:
    affinity = ProduceAffinity()
    for code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
        affinity.refused(PEER, ("t", 0, _batch(416)), code, "")
    assert affinity.refusal(PEER, ("t", 0, _batch(417))) is None


def test_a_refusal_of_batches_without_producer_id_ends_at_the_next_metadata_request() -> None:
    affinity = ProduceAffinity()
    plain = build_batch([(0, None, b"v", ())])
    # Not after NOT_ENOUGH_REPLICAS: clients retry it without a refresh that would end it.
    affinity.refused(PEER, ("t", 0, plain), ErrorCode.NOT_ENOUGH_REPLICAS, "isr")
    assert affinity.refusal(PEER, ("t", 0, plain)) is None
    affinity.refused(PEER, ("t", 0, plain), ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    affinity.refused(PEER, ("t", 1, _batch(3)), ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    assert affinity.refusal(PEER, ("t", 0, plain)) is not None
    affinity.refreshed(OTHER_PEER)
    assert affinity.refusal(PEER, ("t", 0, plain)) is not None
    affinity.refreshed(PEER)
    assert affinity.refusal(PEER, ("t", 0, plain)) is None
    # An idempotent refusal waits for its retry, not for a refresh (which a client may send
    # for other reasons between the refused batch and the next).
    assert affinity.refusal(PEER, ("t", 1, _batch(4))) is not None


def test_a_refusal_expires_and_the_table_is_bounded() -> None:
    clock = _Clock()
    affinity = ProduceAffinity(clock_s=clock, refusals_max=2)
    affinity.refused(PEER, ("t", 0, _batch(1)), ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
    clock.now_s += REFUSAL_HOLD_MS / 1000 + 0.001
    assert affinity.refusal(PEER, ("t", 0, _batch(2))) is None
    affinity.refused(PEER, ("t", 1, _batch(1)), ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
    affinity.refused(PEER, ("t", 2, _batch(1)), ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
    affinity.refused(PEER, ("t", 3, _batch(1)), ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
    assert affinity.refusals == 2
    assert affinity.refusal(PEER, ("t", 3, _batch(2))) is None


def test_unreadable_batches_neither_raise_nor_hold_refusals() -> None:
    affinity = ProduceAffinity()
    old_format = bytearray(_batch(0))
    old_format[16] = 1  # magic 1: read_header refuses it (the node answers INVALID_RECORD)
    affinity.refused(PEER, ("t", 0, bytes(old_format)), ErrorCode.NOT_ENOUGH_REPLICAS, "")
    affinity.refused(PEER, ("t", 0, b"\x00garbage"), ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
    assert affinity.refusal(PEER, ("t", 0, b"\x00garbage")) is not None
    affinity.refused(PEER, ("t", 1, _batch(3)), ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
    assert affinity.refusal(PEER, ("t", 1, bytes(old_format))) is None  # taken as a retry


def test_sequences_wrap_when_telling_a_retry_from_a_batch_behind_it() -> None:
    affinity = ProduceAffinity()
    last = 2**31 - 1
    affinity.refused(PEER, ("t", 0, _batch(last)), ErrorCode.NOT_LEADER_OR_FOLLOWER, "")
    assert affinity.refusal(PEER, ("t", 0, _batch(0))) is not None  # 0 follows 2**31 - 1
    assert affinity.refusal(PEER, ("t", 0, _batch(last))) is None
