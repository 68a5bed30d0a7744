"""Which node processes of a cluster run on this machine: one pid file per node.

`<data_dir>/run/<node>.pid` holds the PID of the node process. Whoever launches a node writes it
(`cluster up` for its children, the keeper of `cluster start` for a detached node), and whoever
sees the node exit removes it. It lives outside `<data_dir>/<node>/`, which holds only the node's
Raft data (a restore or a wipe of that directory must not meet it).

A pid file is believed only while its PID is alive and that process is this node: its command
line (/proc/PID/cmdline) runs `queen_raft node` with this node's `--id` and this config. A file
left by a crash, a reboot or a reused PID is stale: it is removed, and nothing is ever signalled
through it.

`<data_dir>/run/<node>.exit` records how a detached node ended (its keeper waits for it), so that
a `cluster up` that adopted the node can say how it exited. `<data_dir>/run/<node>.lock` is held
while one launcher checks that the node is not running and starts it: two launchers never start
the same node twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Iterator

from queen_raft.config import ClusterConfig

PROC = Path("/proc")
# A keeper records its node's exit right after the node dies; how long a reader waits for that
# record before calling the status unknown (the node was not started by a keeper, or it was killed).
EXIT_RECORD_WAIT_S = 2.0
# How long an empty command line of a live process is read again (see _command_line).
EXEC_SETTLE_S = 0.5


def run_dir(config: ClusterConfig) -> Path:
    return config.data_dir / "run"


def log_dir(config: ClusterConfig) -> Path:
    return config.data_dir / "logs"


def log_path(config: ClusterConfig, node_id: str) -> Path:
    return log_dir(config) / f"{node_id}.log"


def node_command(config_path: Path, node_id: str) -> list[str]:
    """The node's command line; the config path is absolute, so that it identifies the node from any cwd."""
    return [sys.executable, "-m", "queen_raft", "node", "--config", str(Path(config_path).resolve()), "--id", node_id]


def _argument_after(args: list[str], flag: str) -> str | None:
    try:
        return args[args.index(flag) + 1]
    except (ValueError, IndexError):
        return None


def is_node_process(pid: int, config_path: Path, node_id: str) -> bool:
    """Whether PID is alive (not a zombie) and runs this node of this config.

    Without /proc (not Linux) only liveness can be checked, and a live PID is taken for the node."""
    if pid <= 0:
        return False
    if not PROC.is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    raw = _command_line(pid)
    if raw is None:
        return False
    args = raw.decode("utf-8", "replace").split("\0")
    if "queen_raft" not in args or "node" not in args or _argument_after(args, "--id") != node_id:
        return False
    config = _argument_after(args, "--config")
    return config is not None and Path(config).resolve() == Path(config_path).resolve()


def _command_line(pid: int) -> bytes | None:
    """/proc/PID/cmdline; None when the process is gone or a zombie. A process that is finishing
    its exec shows an empty one for a moment (its launcher may already know its PID): read again."""
    deadline = time.monotonic() + EXEC_SETTLE_S
    while True:
        try:
            raw = (PROC / str(pid) / "cmdline").read_bytes()
            stat = (PROC / str(pid) / "stat").read_text()
        except OSError:
            return None
        if stat.rpartition(")")[2].split()[:1] in (["Z"], ["X"]):
            return None
        if raw or time.monotonic() > deadline:
            return raw
        time.sleep(0.005)


def pid_file(config: ClusterConfig, node_id: str) -> Path:
    return run_dir(config) / f"{node_id}.pid"


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def running_pid(config: ClusterConfig, config_path: Path, node_id: str) -> int | None:
    """The PID of this node if its pid file names a live process that is the node; a stale pid
    file is removed."""
    path = pid_file(config, node_id)
    pid = _read_int(path)
    if pid is None:
        if path.exists():
            path.unlink(missing_ok=True)
        return None
    if is_node_process(pid, config_path, node_id):
        return pid
    remove_pid(config, node_id, pid)
    return None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text)
    os.replace(temporary, path)


def write_pid(config: ClusterConfig, node_id: str, pid: int) -> None:
    _write_atomically(pid_file(config, node_id), f"{pid}\n")


def remove_pid(config: ClusterConfig, node_id: str, pid: int) -> None:
    """Removes the pid file only if it still names `pid`: a newer launch may have replaced it."""
    path = pid_file(config, node_id)
    if _read_int(path) == pid:
        path.unlink(missing_ok=True)


def write_exit(config: ClusterConfig, node_id: str, pid: int, returncode: int) -> None:
    _write_atomically(run_dir(config) / f"{node_id}.exit", json.dumps({"pid": pid, "returncode": returncode}))


def read_exit(config: ClusterConfig, node_id: str, pid: int) -> int | None:
    """The return code recorded for this PID of the node (negative: killed by that signal)."""
    try:
        record = json.loads((run_dir(config) / f"{node_id}.exit").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("pid") != pid:
        return None
    returncode = record.get("returncode")
    return returncode if isinstance(returncode, int) else None


def wait_exit_record(config: ClusterConfig, node_id: str, pid: int, timeout_s: float = EXIT_RECORD_WAIT_S) -> int | None:
    """read_exit, polled: a keeper writes the record right after its node dies."""
    deadline = time.monotonic() + timeout_s
    while True:
        returncode = read_exit(config, node_id, pid)
        if returncode is not None or time.monotonic() > deadline:
            return returncode
        time.sleep(0.05)


def describe_exit(returncode: int | None) -> str:
    """`exit status 65`, `killed by signal 9 (SIGKILL)`, or `exit status unknown`."""
    if returncode is None:
        return "exit status unknown"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "?"
        return f"killed by signal {-returncode} ({name})"
    return f"exit status {returncode}"


@contextlib.contextmanager
def launch_lock(config: ClusterConfig, node_id: str) -> Iterator[int]:
    """Held while a launcher checks that the node is not running and starts it; yields the lock's
    file descriptor (a forked keeper closes its copy, or the lock would outlive the launch)."""
    path = run_dir(config) / f"{node_id}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)
