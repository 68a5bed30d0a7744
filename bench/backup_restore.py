"""Backup and restore of a tenant holding 1,000,000 pending timers (target: each <= 10 s).

    .venv/bin/python bench/backup_restore.py                  # 1,000,000 timers
    .venv/bin/python bench/backup_restore.py --timers 100000  # a quick run

One node (the 2-core machine would otherwise hold three copies of the state) from a temp config,
real processes, the commands as an operator runs them:

1. a state of N pending timers (64-byte payloads, due in 1 to 25 hours) is built in this process
   and seeded with `cluster restore` (the start needs a state; scheduling a million timers through
   the API is bench/due_million.py's business, not this one's);
2. the node starts; measured: until /health answers 200 and /api/v1/usage counts N pending;
3. `queen-raft cluster backup` while the node serves: measured (the command, end to end);
4. the node is stopped, its data dir removed, `queen-raft cluster restore` from that backup:
   measured; then the start again until it serves the N timers: measured.

"restore" in the table is the command; "restore + start" adds the time until the node answers with
every timer, which is what an operator waits for.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from queen_raft.backup.manifest import TenantFile, sha256_of, write_manifest  # noqa: E402
from queen_raft.state import TenantState  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BATCH = 256
PAYLOAD = b'{"order":12345,"action":"expire","note":"a sixty-four byte body."}'[:64]
HOUR_MS = 3_600_000
SPREAD_MS = 24 * HOUR_MS
ADMIN_TOKEN = "bench-admin"
SERVE_TIMEOUT_S = 300.0
POLL_S = 0.1


def build_state(count: int) -> TenantState:
    state, now = TenantState(), int(time.time() * 1000)
    for start in range(0, count, BATCH):
        rows = [["bench", f"tenant/{i:09d}", "Default", HOUR_MS + (i * 7919) % SPREAD_MS, f"txn-{i:012d}",
                 f"0193a1b2-c3d4-7e5f-8a6b-{i:012x}", PAYLOAD, False, False]
                for i in range(start, min(start + BATCH, count))]
        answer = state.apply({"op": "timers", "now": now, "producerSub": "bench", "maxPending": None,
                              "ops": [{"op": "schedule_rows", "rows": rows}]})
        assert "results" in answer, answer
    return state


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_config(workdir: Path) -> Path:
    path = workdir / "cluster.toml"
    path.write_text("\n".join([
        "[cluster]", 'name = "bench-backup"', f'data_dir = "{workdir / "data"}"', "",
        "[[nodes]]", 'id = "n1"', 'host = "127.0.0.1"', f"http_port = {free_port()}", f"raft_port = {free_port()}", "",
        "[[tenants]]", 'name = "acme"', "[[tenants.tokens]]", f'token = "{ADMIN_TOKEN}"', 'level = "admin"', "",
        "[settings]", 'raft_password = "bench-backup-raft-password-0123456789"', ""]))
    return path


def http_port(config: Path) -> int:
    return int(next(line for line in config.read_text().splitlines() if line.startswith("http_port")).split("=")[1])


def pending(port: int) -> int | None:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/usage",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return json.loads(answer.read())["pendingTimers"]
    except OSError:
        return None


def start_until_serving(config: Path, count: int, log: Path) -> tuple[subprocess.Popen, float]:
    started = time.perf_counter()
    with open(log, "ab") as log_file:
        node = subprocess.Popen([sys.executable, "-m", "queen_raft", "node", "--config", str(config), "--id", "n1"],
                                stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO)
    deadline = started + SERVE_TIMEOUT_S
    while pending(http_port(config)) != count:
        if node.poll() is not None or time.perf_counter() > deadline:
            node.kill()
            raise RuntimeError(f"the node did not serve {count} timers; see {log}")
        time.sleep(POLL_S)
    return node, time.perf_counter() - started


def timed_cli(*args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "queen_raft", *args], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"queen-raft {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return time.perf_counter() - started


def seed_backup(directory: Path, count: int) -> float:
    started = time.perf_counter()
    data = build_state(count).snapshot()
    built = time.perf_counter() - started
    directory.mkdir()
    (directory / "acme.snapshot").write_bytes(data)
    write_manifest(directory, "bench-backup", ["n1"], [TenantFile(
        "acme", "acme.snapshot", sha256_of(directory / "acme.snapshot"), len(data), 2, int(time.time() * 1000))])
    return built


def run(count: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="queen-backup-bench-") as temp:
        workdir = Path(temp)
        config = write_config(workdir)
        print(f"building a state of {count:,} pending timers ...", flush=True)
        built = seed_backup(workdir / "seed", count)
        timed_cli("cluster", "restore", "--config", str(config), "--from", str(workdir / "seed"))
        node, first_start = start_until_serving(config, count, workdir / "n1.log")
        try:
            backup_s = timed_cli("cluster", "backup", "--config", str(config), "--out", str(workdir / "backup"))
        finally:
            node.terminate()
            node.wait(timeout=60)
        size = (workdir / "backup" / "acme.snapshot").stat().st_size
        shutil.rmtree(workdir / "data")
        restore_s = timed_cli("cluster", "restore", "--config", str(config), "--from", str(workdir / "backup"))
        node, start_s = start_until_serving(config, count, workdir / "n1.log")
        node.terminate()
        node.wait(timeout=60)
    return {"timers": count, "state build s": built, "first start s": first_start, "snapshot MB": size / 1e6,
            "backup s": backup_s, "restore s": restore_s, "start s": start_s, "restore + start s": restore_s + start_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=1_000_000)
    figures = run(parser.parse_args().timers)
    width = max(len(name) for name in figures)
    for name, value in figures.items():
        print(f"{name:<{width}}  {value:,.2f}" if isinstance(value, float) else f"{name:<{width}}  {value:,}")


if __name__ == "__main__":
    main()
