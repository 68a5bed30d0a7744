"""Peer 3: a three-member etcd cluster (Debian's etcd-server) on loopback, each member on free
ports with its own data dir in a temp dir, and the sweeper process (etcd_sweeper.py); all started
and stopped by PID. The timer design is in etcd_timers.py, the bench's client in etcd_client.py.

etcd runs at its defaults (every write fsynced by a majority of members before it is answered)
except for the settings in MEMBER_SETTINGS, each of which says why.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from bench.peers import etcd_timers as keys
from bench.peers.etcd_client import EtcdEndpoint, EtcdTimerClient
from bench.peers.etcd_gateway import b64, prefix_end

MEMBERS = 3
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 2.0
MEMBER_SETTINGS = {
    # A schedule call of 256 ops is one Txn of 512 puts, and a fire Txn of 1,000 due timers holds
    # 3,000 operations: the default (128) would refuse both, and a user would raise it, not split
    # an atomic batch.
    "--max-txn-ops": "4096",
    # Room for a million timers and their fires with every revision kept between compactions
    # (the default 2 GiB raises the "database space exceeded" alarm); 8 GiB is etcd's suggested
    # maximum.
    "--quota-backend-bytes": str(8 * 2**30),
    # Drop old revisions as a production cluster does (Kubernetes compacts every 5 minutes).
    "--auto-compaction-mode": "periodic",
    "--auto-compaction-retention": "5m",
    "--logger": "zap",
    "--log-level": "warn",
}


def _post(url: str, body: dict, timeout: float = PROBE_TIMEOUT_S) -> dict | None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


class EtcdCluster:
    name = "etcd"

    def __init__(self, port_bases: list[int]):
        """port_bases: one base per member; the member listens for clients on base, peers on base + 1."""
        self.root = Path(tempfile.mkdtemp(prefix="bench-etcd-"))
        self.client_urls = [f"http://127.0.0.1:{base}" for base in port_bases]
        self.peer_urls = [f"http://127.0.0.1:{base + 1}" for base in port_bases]
        self.endpoint = EtcdEndpoint(tuple(self.client_urls))
        self.members: list[subprocess.Popen | None] = [None] * MEMBERS
        self.sweeper: subprocess.Popen | None = None
        self._token = f"bench-{uuid.uuid4().hex[:12]}"

    def _member_args(self, index: int) -> list[str]:
        cluster = ",".join(f"m{i + 1}={url}" for i, url in enumerate(self.peer_urls))
        args = ["etcd", "--name", f"m{index + 1}", "--data-dir", str(self.root / f"m{index + 1}"),
                "--listen-client-urls", self.client_urls[index], "--advertise-client-urls", self.client_urls[index],
                "--listen-peer-urls", self.peer_urls[index], "--initial-advertise-peer-urls", self.peer_urls[index],
                "--initial-cluster", cluster, "--initial-cluster-token", self._token,
                "--initial-cluster-state", "new"]
        for flag, value in MEMBER_SETTINGS.items():
            args += [flag, value]
        return args

    def start_member(self, index: int) -> None:
        log = open(self.root / f"m{index + 1}.log", "ab")
        # Debian's package reads ETCD_* variables as flags: the bench's flags alone configure it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
        self.members[index] = subprocess.Popen(self._member_args(index), stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    def status(self, index: int) -> dict | None:
        return _post(self.client_urls[index] + "/v3/maintenance/status", {})

    def serving(self, index: int) -> bool:
        """The member answers a linearizable read (it has a leader and has caught up to its commit)."""
        answer = _post(self.client_urls[index] + "/v3/kv/range",
                       {"key": b64(keys.ELECTION), "count_only": True})
        return answer is not None and "header" in answer

    def wait_serving(self, index: int, started: float) -> float:
        """Seconds from `started` until the member serves; raises if it exited or never does."""
        deadline = started + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.serving(index):
                return time.monotonic() - started
            if self.members[index].poll() is not None:
                raise RuntimeError(f"etcd m{index + 1} exited: {self.log_tail(index)}")
            time.sleep(0.01)
        raise RuntimeError(f"etcd m{index + 1} not serving in {START_TIMEOUT_S} s: {self.log_tail(index)}")

    def log_tail(self, index: int) -> str:
        return (self.root / f"m{index + 1}.log").read_text(errors="replace")[-2000:]

    def start(self) -> None:
        try:
            for index in range(MEMBERS):
                self.start_member(index)
            started = time.monotonic()
            for index in range(MEMBERS):
                self.wait_serving(index, started)
            self.sweeper = subprocess.Popen([sys.executable, "-m", "bench.peers.etcd_sweeper", "--urls",
                                             ",".join(self.client_urls)], cwd=Path(__file__).resolve().parents[2])
            self._wait_sweeper_elected()
        except BaseException:
            self.stop()
            raise

    def _wait_sweeper_elected(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            answer = _post(self.client_urls[0] + "/v3/kv/range", {"key": b64(keys.ELECTION), "count_only": True})
            if answer and int(answer.get("count", 0)) == 1:
                return
            if self.sweeper.poll() is not None:
                raise RuntimeError("the etcd sweeper exited")
            time.sleep(0.02)
        raise RuntimeError(f"the etcd sweeper was not elected in {START_TIMEOUT_S} s")

    def leader_index(self) -> int:
        """The member that leads the Raft group now."""
        ids: dict[str, int] = {}
        leader = None
        for index in range(MEMBERS):
            status = self.status(index) if self.running(index) else None
            if status:
                ids[status["header"]["member_id"]] = index
                leader = status.get("leader") or leader
        if leader not in ids:
            raise RuntimeError("no etcd leader")
        return ids[leader]

    def running(self, index: int) -> bool:
        return self.members[index] is not None and self.members[index].poll() is None

    def kill_member(self, index: int) -> None:
        os.kill(self.members[index].pid, signal.SIGKILL)
        self.members[index].wait()

    def restart_member_after_crash(self, index: int) -> float:
        """kill -9 of the member, started again at once as a supervisor would; seconds until it
        serves a linearizable read (it replayed its WAL and rejoined the group)."""
        self.kill_member(index)
        started = time.monotonic()
        self.start_member(index)
        return self.wait_serving(index, started)

    def restart_after_crash(self) -> float:
        """The failover event: kill -9 of the leader member, restarted at once."""
        leader = self.leader_index()
        self.killed_member = f"etcd-m{leader + 1} (leader)"
        return self.restart_member_after_crash(leader)

    def applied_index(self, index: int) -> int | None:
        status = self.status(index)
        return int(status["raftAppliedIndex"]) if status else None

    def stop(self) -> None:
        for proc in [self.sweeper, *self.members]:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        found = {f"etcd-m{i + 1}": proc.pid for i, proc in enumerate(self.members)
                 if proc is not None and proc.poll() is None}
        if self.sweeper is not None and self.sweeper.poll() is None:
            found["sweeper"] = self.sweeper.pid
        return found

    def client(self, concurrency: int = 1) -> EtcdTimerClient:
        return self.endpoint.open_client(concurrency)

    def pending_on(self, index: int) -> int:
        answer = _post(self.client_urls[index] + "/v3/kv/range",
                       {"key": b64(keys.TIMERS), "range_end": b64(prefix_end(keys.TIMERS)), "count_only": True},
                       timeout=30.0)
        return int(answer.get("count", 0)) if answer else -1
