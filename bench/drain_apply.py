"""A drain's apply on one replica, in one process: CPU microseconds per fire.

    .venv/bin/python bench/drain_apply.py                      # 200,000 due over 5 instants
    .venv/bin/python bench/drain_apply.py --timers 1000000 --drains 1
    .venv/bin/python bench/drain_apply.py --not-answering      # as a follower applies it

The due_million shape: timers scheduled through `timers` entries of 256 schedule rows (one queue,
keys and txns `m-<i>`, messageIds as the API mints them, the scenarios' payload), due over a few
instants; then `tick` entries of the adaptive batch's ceiling (4,096 by default) until nothing is
due. Each tick is packed and unpacked with msgpack as the Raft layer hands it over, and its answer
packed (the leader's answer goes back to its loop thread; `--not-answering` skips that, as a
follower's state leaves out answers nobody reads). Only the ticks are timed, in this process's CPU
time, with the node's collector thresholds (queen_raft/node.py), the state built and frozen first
as a node restored from a snapshot would be. Every system shares this machine's cores: CPU time,
not wall time, is the figure that does not depend on the neighbours; compare commits by
alternating runs (bench/README.md, "Where a drain's CPU goes").
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgpack  # noqa: E402

from bench.timer_service import PAYLOAD, QUEUE  # noqa: E402
from queen_raft.api.ids import uuid7_batch  # noqa: E402
from queen_raft.node import GC_THRESHOLDS  # noqa: E402
from queen_raft.state import TenantState  # noqa: E402

START_MS = 1_767_225_600_000
DUE_AFTER_MS = 60_000
ROWS_PER_ENTRY = 256
POLICY = {"fireMaxBytes": 4 * 1024 * 1024, "maxAttempts": 5, "backoffMinMs": 1000,
          "backoffMaxMs": 60_000, "transientBackoffMs": 1000}


def loaded_state(timers: int, instants: int) -> TenantState:
    state = TenantState()
    now = START_MS
    for first in range(0, timers, ROWS_PER_ENTRY):
        seqs = range(first, min(timers, first + ROWS_PER_ENTRY))
        ids = uuid7_batch(len(seqs), now)
        rows = [[QUEUE, f"m-{i}", "Default", START_MS + DUE_AFTER_MS + i * instants // timers - now,
                 f"m-{i}", message_id, PAYLOAD, False, False] for i, message_id in zip(seqs, ids)]
        entry = msgpack.packb({"op": "timers", "now": now, "producerSub": "bench", "maxPending": None,
                               "ops": [{"op": "schedule_rows", "rows": rows}]}, use_bin_type=True)
        answer = state.apply(msgpack.unpackb(entry, raw=False))
        assert "results" in answer, answer
        now += 1
    return state


def drain_us_per_fire(state: TenantState, fire_batch: int, answering: bool) -> float:
    now = START_MS + DUE_AFTER_MS + 1_000
    policy = {"fireBatch": fire_batch, **POLICY}
    state.answering = answering
    fired, cpu = 0, 0.0
    while True:
        entry = msgpack.packb({"op": "tick", "policy": policy, "now": now}, use_bin_type=True)
        started = time.process_time()
        answer = state.apply(msgpack.unpackb(entry, raw=False))
        if answering:
            msgpack.packb(answer, use_bin_type=True)
        cpu += time.process_time() - started
        assert answer["appended"] == answer["fired"], answer
        fired += answer["fired"]
        now += 5
        if not answer["moreDue"]:
            return cpu / fired * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timers", type=int, default=200_000)
    parser.add_argument("--instants", type=int, default=5)
    parser.add_argument("--fire-batch", type=int, default=4096)
    parser.add_argument("--drains", type=int, default=3, help="each on a fresh state; the median is printed too")
    parser.add_argument("--not-answering", action="store_true")
    args = parser.parse_args()
    gc.set_threshold(*GC_THRESHOLDS)
    figures = []
    for _ in range(args.drains):
        state = loaded_state(args.timers, args.instants)
        gc.collect()
        gc.freeze()
        figures.append(drain_us_per_fire(state, args.fire_batch, not args.not_answering))
        del state
        gc.unfreeze()
        gc.collect()
    print("us per fire:", " ".join(f"{figure:.3f}" for figure in figures),
          f"median {statistics.median(figures):.3f}")


if __name__ == "__main__":
    main()
