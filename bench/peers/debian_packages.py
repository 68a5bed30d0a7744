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


def ensure_installed() -> None:
    """apt-get install redis-server postgresql, once, when either server binary is missing."""
    have_redis = shutil.which("redis-server") is not None
    have_postgres = postgres_bin_dir() is not None and shutil.which("runuser") is not None
    try:
        import pwd
        pwd.getpwnam("postgres")
    except KeyError:
        have_postgres = False
    if have_redis and have_postgres:
        return
    if os.geteuid() != 0:
        raise RuntimeError("redis-server or postgresql is missing and this is not root: apt-get install -y redis-server postgresql")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=APT_TIMEOUT_S)
    subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server", "postgresql"], check=True, env=env,
                   timeout=APT_TIMEOUT_S)
