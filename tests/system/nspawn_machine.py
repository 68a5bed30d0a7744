"""A Debian machine booted by systemd-nspawn, with a real systemd as its PID 1, for tests of the
systemd unit.

The root file system is made once by debootstrap (minbase, plus systemd, dbus and python3) into the
repo's git-ignored `data/systemd-rootfs` and reused while present; every run boots a copy of it, so a
run never changes the cache. The machine shares the host's network: a node listening on 127.0.0.1
inside answers the test on the host. Commands run inside through `nsenter` into the namespaces of the
machine's systemd, with a clean environment (the host's variables, pip's among them, stay out).
Needs root, `systemd-nspawn` (Debian: systemd-container) and, to build the cache, `debootstrap`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTFS_CACHE = REPO / "data" / "systemd-rootfs"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
ROOTFS_PACKAGES = "systemd,systemd-sysv,dbus,python3,python3-venv,ca-certificates"
MACHINE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}
# Booting to `running` takes about 8 s on a loaded 2-core machine; a clean poweroff a few seconds.
BOOT_TIMEOUT_S = 90.0
POWEROFF_TIMEOUT_S = 60.0
DEBOOTSTRAP_TIMEOUT_S = 1800.0
POLL_INTERVAL_S = 0.2


def machine_unavailable_reason() -> str | None:
    """Why this host cannot boot a test machine, or None when it can."""
    if os.geteuid() != 0:
        return "needs root: it boots a container with systemd-nspawn and nsenters it"
    if shutil.which("systemd-nspawn") is None or shutil.which("nsenter") is None:
        return "needs systemd-nspawn and nsenter (apt-get install systemd-container util-linux)"
    if not ROOTFS_CACHE.is_dir() and shutil.which("debootstrap") is None:
        return f"needs debootstrap to build {ROOTFS_CACHE.relative_to(REPO)} (apt-get install debootstrap)"
    return None


def ensure_rootfs_cache() -> Path:
    """The cached root file system, built by debootstrap when missing (about 5 minutes). It is
    built beside the cache and renamed into place, so an interrupted build is never taken for one."""
    if ROOTFS_CACHE.is_dir():
        return ROOTFS_CACHE
    partial = ROOTFS_CACHE.with_name(ROOTFS_CACHE.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={ROOTFS_PACKAGES}", DEBIAN_SUITE,
                    str(partial), DEBIAN_MIRROR], check=True, capture_output=True, timeout=DEBOOTSTRAP_TIMEOUT_S)
    partial.rename(ROOTFS_CACHE)
    return ROOTFS_CACHE


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(child) for child in text.split()]


class NspawnMachine:
    """One booted copy of the cached root file system at `root` (a directory of the test's)."""

    def __init__(self, root: Path, log_path: Path):
        self.root = Path(root)
        self.log_path = Path(log_path)
        self.nspawn: subprocess.Popen | None = None
        self.systemd_pid: int | None = None
        self.boot_state = ""

    def copy_from(self, cache: Path) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        subprocess.run(["cp", "-a", "--reflink=auto", str(cache), str(self.root)], check=True)
        # A persistent journal (journald keeps it when this directory exists): a test reads what the
        # units logged during the previous boot's shutdown.
        self.path("/var/log/journal").mkdir(parents=True, exist_ok=True)

    def boot(self) -> float:
        """Starts the machine and waits until its systemd says `running`; the seconds it took."""
        started = time.monotonic()
        self.systemd_pid = None
        with open(self.log_path, "ab") as log:
            self.nspawn = subprocess.Popen(
                ["systemd-nspawn", "-D", str(self.root), "--quiet", "--register=no", "--keep-unit",
                 "--console=passive", "-b"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = started + BOOT_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            if self.nspawn.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited {self.nspawn.returncode}: see {self.log_path}")
            if self.systemd_pid is None:
                self.systemd_pid = self._find_systemd()
            if self.systemd_pid is not None:
                state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
                if state in ("running", "degraded"):
                    self.boot_state = state
                    return time.monotonic() - started
            time.sleep(POLL_INTERVAL_S)
        raise RuntimeError(f"the machine did not boot in {BOOT_TIMEOUT_S} s (state {state!r}); see {self.log_path}")

    def _find_systemd(self) -> int | None:
        for child in _children(self.nspawn.pid):
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    return child
            except OSError:
                continue
        return None

    def run(self, *argv: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """argv run inside the machine, as root; its output as text."""
        result = subprocess.run(["nsenter", "-t", str(self.systemd_pid), "-a", *argv], env=MACHINE_ENV,
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    def path(self, inside: str) -> Path:
        """The host's path to a file of the machine."""
        return self.root / inside.lstrip("/")

    def unit_properties(self, unit: str, *names: str) -> dict[str, str]:
        out = self.run("systemctl", "show", unit, "-p", ",".join(names)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, *units: str, boot: str | None = None) -> str:
        """The journal of `units` (every unit when none), of every boot or of `boot` ("-1": the one before)."""
        argv = ["journalctl", "--no-pager", "-o", "short-monotonic", *(["-b", boot] if boot else [])]
        for unit in units:
            argv += ["-u", unit]
        return self.run(*argv, check=False).stdout

    def poweroff(self) -> None:
        """A clean shutdown through the machine's systemd; SIGTERM to nspawn (which asks systemd for
        the same), then SIGKILL, only when that does not end it in time."""
        if self.nspawn is None or self.nspawn.poll() is not None:
            return
        if self.systemd_pid is not None:
            self.run("systemctl", "poweroff", check=False, timeout=30.0)
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self.nspawn.send_signal(sig)
            try:
                self.nspawn.wait(timeout=POWEROFF_TIMEOUT_S)
                return
            except subprocess.TimeoutExpired:
                continue
