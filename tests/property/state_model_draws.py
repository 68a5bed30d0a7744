"""What the state-against-model test (test_state_model.py) draws from: its queues, partitions, keys
and groups, the proposer clock's steps, delays, payloads and fire policies, and how an answer is
compared with the model's.
"""

from hypothesis import strategies as st

from model_contract import DEFAULT_PARTITION


QUEUES = ["q0", "q1"]  # q0 may be configured at the start; q1 is only ever created implicitly.
PARTITIONS = [DEFAULT_PARTITION, "a", "p1"]  # "Default" sorts first: pop(None) takes it first.
TIMER_KEYS = ["k0", "k1", "k2", "k3", "tenant/42", "Z", "é"]  # "é" sorts last as UTF-8 bytes.
PRODUCER = "producer-1"
# None is the queue-mode group; "g1" a named group reading the same partitions independently.
DISTINCT_GROUPS = [None, "g1"]
CONSUMER_GROUPS = [None, None, "g1"]  # drawn: queue mode twice as often

START_WALL_MS = 1_700_000_000_000
HOUR_MS = 3_600_000

# Enough ops per batch to interleave statuses, few enough that keys collide across batches.
MAX_OPS_PER_BATCH = 4
MAX_PUSH_ITEMS = 4
MAX_POP_BATCH = 4
# Payloads around the 12-byte maxPayloadBytes that q0 may get, and around the small fireMaxBytes.
MAX_PAYLOAD = 20
# Pages small enough that paging itself is exercised.
FETCH_PAGE = 3
LIST_PAGE = 2
# Prefixes of the listing: several keys, one key, a key's own text, none of them.
LIST_PREFIXES = ["k", "tenant/", "Z", "é", "k3", "x"]

# The proposer's clock: stays, creeps, jumps past leases and dedup windows, or runs backwards
# (another node, behind by seconds, proposes).
CLOCK_STEPS = st.one_of(
    st.just(0),
    st.integers(1, 1500),
    st.integers(-5000, -1),
    st.integers(1500, 8000),
    st.sampled_from([HOUR_MS - 1, HOUR_MS, HOUR_MS + 1, 300_000]),
)
DELAYS = st.one_of(
    st.integers(-2000, 0),  # already due: fires in the scheduling entry
    st.integers(1, 3000),
    st.integers(3000, 20_000),
    st.sampled_from([0, 1000, 2000]),  # due-time ties: only (queue, timerKey) orders the fires
)
# q0 may be configured with a 12-byte payload limit, which some payloads exceed and some do not.
SMALL_PAYLOAD_LIMIT = 12
DEFAULT_MAX_PAYLOAD_BYTES = 1048576
SMALL_PAYLOAD_MAX = 8
OVER_SMALL_LIMIT = 13
# Few distinct sizes, so a fire batch's byte total often lands exactly on fireMaxBytes.
PAYLOAD_SIZES = [0, 1, 4, SMALL_PAYLOAD_MAX, OVER_SMALL_LIMIT, MAX_PAYLOAD]
PAYLOADS = st.sampled_from(PAYLOAD_SIZES).flatmap(lambda n: st.binary(min_size=n, max_size=n))
POLICY_DICTS = st.fixed_dictionaries({
    "fireBatch": st.integers(1, 3),
    "fireMaxBytes": st.sampled_from([1, 4, 5, 8, 9, 12, 13, 16, 17, 21, 26, 40]),
    "maxAttempts": st.integers(1, 3),
    "backoffMinMs": st.integers(1, 500),
    "backoffMaxMs": st.integers(500, 2000),
})
FIRE_POLICIES = st.one_of(st.none(), POLICY_DICTS)
# Ticks carry a tight policy two times in three, so fire bounds, backoff and the DLQ are reached.
TICK_POLICIES = st.one_of(st.none(), POLICY_DICTS, POLICY_DICTS)


def assert_matches(got, want, where="answer"):
    """Every key the model answers must be in the state's answer with the same value; the state
    may add keys the contract does not name."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {got!r} is not a dict, want {want!r}"
        for key, value in want.items():
            assert key in got, f"{where}: missing {key!r} in {got!r}, want {want!r}"
            assert_matches(got[key], value, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list), f"{where}: {got!r} is not a list, want {want!r}"
        assert len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_matches(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def without_lease_ids(pop_answer):
    """autoAck keeps no lease; the contract does not say which leaseId such an answer shows."""
    return {"messages": [{k: v for k, v in m.items() if k != "leaseId"}
                         for m in pop_answer["messages"]]}
