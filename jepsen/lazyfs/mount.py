"""The harness's side of a lazy filesystem: mount it, power it off, unmount it (by the daemon's PID).

One daemon per mount (`python -m jepsen.lazyfs`). A power-off arms the daemon, unmounts (the kernel
first writes back every dirty page it still holds, which the daemon then drops with the rest), and
reads the daemon's account of what it dropped; `mount()` then mounts the backing directory again,
with a fresh kernel cache, so nothing the power loss dropped can be read back.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

MOUNT_TIMEOUT_S = 10.0
# An unmount is refused (EBUSY) while a killed process still holds files open: retried until this.
UNMOUNT_TIMEOUT_S = 10.0
UNMOUNT_RETRY_S = 0.05
# After an unmount the daemon's loop ends once the kernel closes the FUSE connection. Now and then
# the kernel keeps it open with nothing left to serve (no file of the mount open
# anywhere); past this grace the harness aborts it through fusectl, as `umount -f` would.
DISCONNECT_GRACE_S = 2.0
FUSECTL = Path("/sys/fs/fuse/connections")


def lazyfs_unavailable() -> str | None:
    """Why a lazy filesystem cannot be mounted here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian package fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as error:
        return f"mfusepy cannot load libfuse3 ({error})"
    return None


class LazyMount:
    def __init__(self, backing: Path, mountpoint: Path, log_path: Path) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.connection: int | None = None  # the kernel's FUSE connection id (the mount's st_dev minor)
        self.aborted_connections = 0
        self._lines: queue.Queue[str] = queue.Queue()
        backing.mkdir(parents=True, exist_ok=True)
        mountpoint.mkdir(parents=True, exist_ok=True)

    def mount(self) -> None:
        if os.path.ismount(self.mountpoint):  # left by a daemon that died: detach it first
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], capture_output=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jepsen.lazyfs", str(self.backing), str(self.mountpoint)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                cwd=str(Path(__file__).resolve().parents[2]), start_new_session=True)
        self._lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self.process, self._lines), daemon=True).start()
        answer = self._next_line(MOUNT_TIMEOUT_S)
        if not answer.get("ready"):
            self.close()
            raise RuntimeError(f"the lazy filesystem on {self.mountpoint} did not mount: {answer}; see {self.log_path}")
        self.connection = os.minor(os.stat(self.mountpoint).st_dev)

    @staticmethod
    def _pump(process: subprocess.Popen, lines: queue.Queue) -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put("")

    def _next_line(self, timeout_s: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            return {"error": f"no answer within {timeout_s:.0f} s"}
        return json.loads(line) if line.strip() else {"error": "the daemon exited"}

    def _unmount(self) -> bool:
        deadline = time.monotonic() + UNMOUNT_TIMEOUT_S
        while True:
            done = subprocess.run(["fusermount3", "-u", str(self.mountpoint)], capture_output=True, text=True)
            if done.returncode == 0:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(UNMOUNT_RETRY_S)

    def _disconnect(self) -> bool:
        """Abort the FUSE connection left open after the unmount (mounting fusectl if needed)."""
        control = FUSECTL / str(self.connection) / "abort"
        if not control.exists():
            subprocess.run(["mount", "-t", "fusectl", "none", str(FUSECTL)], capture_output=True)
        try:
            control.write_text("1")
        except OSError:
            return False
        self.aborted_connections += 1
        return True

    def _after_unmount(self) -> dict:
        """The daemon's last line, aborting the connection if the kernel keeps it open."""
        answer = self._next_line(DISCONNECT_GRACE_S)
        if "error" in answer and answer["error"].startswith("no answer") and self._disconnect():
            answer = self._next_line(MOUNT_TIMEOUT_S)
            answer["connection_aborted"] = True
        return answer

    def power_off(self, torn_seed: int | None = None) -> dict:
        """Drop everything not durable; the mount is gone afterwards (call mount() again)."""
        command = "power-off" + (f" torn {torn_seed}" if torn_seed is not None else "")
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        armed = self._next_line(MOUNT_TIMEOUT_S)
        if not armed.get("armed"):
            raise RuntimeError(f"the lazy filesystem on {self.mountpoint} did not take power-off: {armed}")
        if not self._unmount():
            raise RuntimeError(f"{self.mountpoint} stayed busy for {UNMOUNT_TIMEOUT_S:.0f} s")
        answer = self._after_unmount()
        self.process.wait(MOUNT_TIMEOUT_S)
        self.process = None
        report = answer.get("power_off") or answer
        if answer.get("connection_aborted"):
            report["connection_aborted"] = True
        return report

    def close(self) -> None:
        """A clean unmount (keeps everything); ends the daemon by its PID if it does not exit."""
        if self.process is None:
            return
        if os.path.ismount(self.mountpoint) and not self._unmount():
            # Still busy: detach it now (the daemon exits once the last file is closed).
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], capture_output=True)
        else:
            self._after_unmount()
        try:
            self.process.wait(MOUNT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None
