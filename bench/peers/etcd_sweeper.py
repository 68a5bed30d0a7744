"""The etcd timer design's sweeper process: wins an election held with an etcd lease, then fires
what is due every POLL_INTERVAL_S (the transactions are in etcd_timers.py).

The election: grant a lease of LEASE_TTL_S, then one Txn "create `sweeper/leader` with this lease
if it does not exist" (compare its create_revision with 0); the key's value is the lease ID, so a
sweeper that finds its own lease there holds the election. The winner keeps the lease alive
every KEEPALIVE_EVERY_S and fences each fire Txn on the election key's create_revision; a loser
(or a winner whose lease ran out) tries again every LEASE_TTL_S / 2, so a standby sweeper started
with the same command takes over within 1.5 lease TTLs of the winner's death. The bench runs one.

Run: `python -m bench.peers.etcd_sweeper --urls http://127.0.0.1:N,...`.
"""

from __future__ import annotations

import argparse
import http.client
import time

from bench.peers import etcd_gateway as gw
from bench.peers import etcd_timers as keys
from bench.peers.worker_loop import run_until_sigterm

POLL_INTERVAL_S = 0.05   # as the Redis and PostgreSQL pollers
SWEEP_BATCH = 1000       # due entries per fire Txn (as the other pollers' batch); 3 ops each, <= max-txn-ops
LEASE_TTL_S = 5          # etcd's shortest sensible TTL is ~1.5 election timeouts (1.5 s at its defaults)
KEEPALIVE_EVERY_S = 1.0
FAILURES = (OSError, http.client.HTTPException, gw.GatewayError, ValueError)


def now_ms() -> int:
    return int(time.time() * 1000)


class Sweeper:
    def __init__(self, gateway):
        self.gateway = gateway
        self.lease_id: int | None = None
        self.election_revision: int | None = None  # set while this sweeper holds the election
        self._kept_alive_at = 0.0
        self._campaigned_at = -LEASE_TTL_S

    def campaign(self) -> bool:
        """One attempt to become the sweeper; True when this process holds the election key."""
        if time.monotonic() - self._campaigned_at < LEASE_TTL_S / 2:
            return False
        self._campaigned_at = time.monotonic()
        if self.lease_id is None:
            self.lease_id = int(self.gateway.call("/v3/lease/grant", {"TTL": LEASE_TTL_S})["ID"])
            self._kept_alive_at = time.monotonic()
        answer = self.gateway.call("/v3/kv/txn", gw.txn(
            [gw.create_revision_is(keys.ELECTION, 0)],
            [gw.put(keys.ELECTION, b"%d" % self.lease_id, lease=self.lease_id), gw.get(keys.ELECTION)],
            failure=[gw.get(keys.ELECTION)]))
        holder = gw.txn_ranges(answer)[-1]
        # Won now, or won before and the answer was lost (the key holds this sweeper's lease).
        if holder and holder[0]["value"] == b"%d" % self.lease_id:
            self.election_revision = holder[0]["create_revision"]
            return True
        return False

    def keep_alive(self) -> None:
        if self.lease_id is None or time.monotonic() - self._kept_alive_at < KEEPALIVE_EVERY_S:
            return
        answer = self.gateway.call("/v3/lease/keepalive", {"ID": str(self.lease_id)})
        if int(answer.get("result", {}).get("TTL", 0)) <= 0:  # expired: the election key went with it
            self.lease_id = self.election_revision = None
        self._kept_alive_at = time.monotonic()

    def sweep_once(self) -> int:
        """Fires what is due, one batch; the number of due entries handled (a full batch: go again)."""
        answer = self.gateway.call("/v3/kv/range", gw.range_request(
            keys.DUE, keys.due_bound(now_ms()), limit=SWEEP_BATCH, serializable=True))
        due = gw.kvs(answer)
        if not due:
            return 0
        if self._fire(keys.sweep_plan(due, now_ms(), self.election_revision)):
            return len(due)
        if self.election_revision is None:
            return 0
        # A timer changed since its entry was written: read the timers, then judge each entry.
        timers = keys.distinct_timer_keys(due)
        read = self.gateway.call("/v3/kv/txn", gw.txn([], [gw.get(k) for k in timers]))
        revisions = {k: (found[0]["mod_revision"] if found else 0) for k, found in zip(timers, gw.txn_ranges(read))}
        self._fire(keys.sweep_plan(due, now_ms(), self.election_revision, revisions))
        return len(due)  # fired, or a timer changed again: read again at once

    def _fire(self, plan: keys.SweepPlan) -> bool:
        answer = self.gateway.call("/v3/kv/txn", plan.body)
        if answer.get("succeeded"):
            return True
        holder = gw.txn_ranges(answer)[0]
        if not holder or holder[0]["create_revision"] != self.election_revision:
            self.election_revision = None  # lost the election: stop firing at once
        return False

    def step(self) -> int:
        self.keep_alive()
        if self.election_revision is None and not self.campaign():
            return 0
        return self.sweep_once()


def run_sweeper(urls: list[str]) -> None:
    # FAILURES: a member went away or the cluster has no leader yet: try again next round.
    run_until_sigterm(Sweeper(gw.SyncGateway(urls)).step, SWEEP_BATCH, POLL_INTERVAL_S, FAILURES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--urls", required=True, help="the members' client URLs, comma-separated")
    run_sweeper(parser.parse_args().urls.split(","))


if __name__ == "__main__":
    main()
