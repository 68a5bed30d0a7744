"""The fired memory's key maps are lazy (queen_raft/state/fired_memory.py): a fire only appends its
records, and the maps take them in when asked. Properties, over random sequences of fires (records
of a few keys, fire instants that never go back, windows of several lengths), forgets, trims and
reads, under a small count bound:

- a memory that brings its maps up to date only when an operation needs it, one that does so after
  every step, and one whose reads come at random points (as a peek on one replica does) answer
  every lookup alike and write the same snapshot rows at every step;
- all three answer as an eager reference model of the contract: per key the latest record no
  forget removed, kept while the record is within the count bound (oldest first) and unexpired.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypothesis_depth import PROPERTY_TIMEOUT_S, SEQUENCE_SETTINGS
from queen_raft.state import limits
from queen_raft.state.fired_memory import F_EXPIRES_AT, F_KEY, F_QUEUE, FiredMemory

pytestmark = pytest.mark.timeout(PROPERTY_TIMEOUT_S)

QUEUES = ["q0", "q1"]
KEYS = ["a", "b", "c", "d", "e"]
BOUND = 6


class EagerModel:
    """The contract without laziness: a list in fire order and a map filed at every fire."""

    def __init__(self) -> None:
        self.order: list[tuple] = []
        self.answers: dict[tuple[str, str], tuple] = {}

    def remember(self, record: tuple) -> None:
        self.order.append(record)
        self.answers[(record[F_QUEUE], record[F_KEY])] = record

    def forget(self, queue: str, key: str) -> None:
        self.answers.pop((queue, key), None)

    def trim(self, now: int) -> None:
        while self.order and (len(self.order) > BOUND or self.order[0][F_EXPIRES_AT] <= now):
            oldest = self.order.pop(0)
            name = (oldest[F_QUEUE], oldest[F_KEY])
            if self.answers.get(name) is oldest:
                del self.answers[name]

    def find(self, queue: str, key: str, clock: int) -> tuple | None:
        record = self.answers.get((queue, key))
        return None if record is None or record[F_EXPIRES_AT] <= clock else record

    def rows(self) -> list:
        return [[*record, self.answers.get((record[F_QUEUE], record[F_KEY])) is record]
                for record in self.order]


fire = st.tuples(st.just("fire"), st.lists(st.tuples(st.sampled_from(QUEUES), st.sampled_from(KEYS),
                                                     st.sampled_from([1, 5, 50])), min_size=1, max_size=4),
                 st.integers(0, 3))
forget = st.tuples(st.just("forget"), st.sampled_from(QUEUES), st.sampled_from(KEYS))
read = st.tuples(st.just("read"), st.sampled_from(QUEUES), st.sampled_from(KEYS))
snapshot = st.tuples(st.just("snapshot"))
steps = st.lists(st.one_of(fire, fire, forget, read, snapshot), min_size=1, max_size=40)


@SEQUENCE_SETTINGS
@given(steps=steps, read_points=st.lists(st.booleans(), min_size=40, max_size=40))
def test_lazy_key_maps_answer_and_snapshot_as_the_eager_contract(steps, read_points):
    limits_bound = limits.MAX_REMEMBERED_FIRES
    limits.MAX_REMEMBERED_FIRES = BOUND
    try:
        lazy, eager, reader, model = FiredMemory(), FiredMemory(), FiredMemory(), EagerModel()
        memories = (lazy, eager, reader)
        now = 0
        for index, step in enumerate(steps):
            if step[0] == "fire":
                _, fires, advance = step
                now += advance
                for serial, (queue, key, window) in enumerate(fires):
                    record = (now, now + window, queue, key, "Default", f"t{index}.{serial}", index, "m")
                    for memory in memories:
                        memory.remember(record)
                    model.remember(record)
                for memory in memories:
                    memory.trim(now)
                model.trim(now)
            elif step[0] == "forget":
                for memory in memories:
                    memory.forget(step[1], step[2])
                model.forget(step[1], step[2])
            elif step[0] == "read":
                expected = model.find(step[1], step[2], now)
                assert all(memory.find(step[1], step[2], now) is expected for memory in memories)
            else:
                assert all(memory.to_wire() == model.rows() for memory in memories)
            eager.index_tail()
            if read_points[index % len(read_points)]:
                reader.find(QUEUES[0], KEYS[0], now)  # a read on this replica only
            assert [len(memory) for memory in memories] == [len(model.order)] * 3
        for queue in QUEUES:
            for key in KEYS:
                expected = model.find(queue, key, now)
                assert all(memory.find(queue, key, now) is expected for memory in memories)
        assert all(memory.to_wire() == model.rows() for memory in memories)
    finally:
        limits.MAX_REMEMBERED_FIRES = limits_bound
