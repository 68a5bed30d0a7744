"""Installs the peers' servers from Debian's packages when they are missing (the suite runs as root)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

POSTGRES_BIN_ROOT = Path("/usr/lib/postgresql")
# apt-get on a cold cache downloads ~60 MB; give it room on a slow mirror, then fail loudly.
APT_TIMEOUT_S = 900


def postgres_bin_dir() -> Path | None:
    versions = sorted(POSTGRES_BIN_ROOT.glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    return versions[-1].parent if versions else None


def _missing_packages(system: str) -> list[str]:
    if system == "etcd":
        return [] if shutil.which("etcd") else ["etcd-server"]
    have_redis = shutil.which("redis-server") is not None
    have_postgres = postgres_bin_dir() is not None and shutil.which("runuser") is not None
    try:
        import pwd
        pwd.getpwnam("postgres")
    except KeyError:
        have_postgres = False
    return [] if have_redis and have_postgres else ["redis-server", "postgresql"]


def ensure_installed(system: str = "redis") -> None:
    """apt-get install the peer's packages, once, when its server binary is missing: etcd-server
    for etcd; redis-server and postgresql for either of those two."""
    packages = _missing_packages(system)
    if not packages:
        return
    if os.geteuid() != 0:
        raise RuntimeError(f"{system} is missing and this is not root: apt-get install -y {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=APT_TIMEOUT_S)
    subprocess.run(["apt-get", "install", "-y", "-qq", *packages], check=True, env=env, timeout=APT_TIMEOUT_S)
