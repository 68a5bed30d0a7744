"""The Raft peer password: every node has one, loopback included.

The peer protocol is pysyncobj's, pickle over TCP; only its encryption (Fernet, or the AEAD frame of
raft/peer_frame.py, both keyed by this password) keeps a stranger's pickle from being unpickled, so
a node never starts without one. Where a node finds it, first match wins:

1. `raft_password` in `[settings]`, or `QUEEN_RAFT_PASSWORD`;
2. `raft_password_file` in `[settings]`, or `QUEEN_RAFT_PASSWORD_FILE`: a file holding it (one line;
   surrounding whitespace is ignored);
3. `<data_dir>/raft-password` (DEV_PASSWORD_FILE_NAME), if it exists: the file
   `queen-raft cluster up` writes for a dev config.

`cluster up` on a config that names no password (a dev config: every address is loopback, or the
config would have been refused) writes a random one to `<data_dir>/raft-password`, mode 0600, once,
and every node it starts on this machine reads it from there. A config with a non-loopback address
must name its password (1 or 2): nodes on different machines do not share a data dir.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import replace
from pathlib import Path

from queen_raft.config import ClusterConfig, ConfigError

log = logging.getLogger(__name__)

DEV_PASSWORD_FILE_NAME = "raft-password"
# 32 random bytes, URL-safe base64: as strong as the Fernet key it derives.
GENERATED_PASSWORD_BYTES = 32

_HOW_TO_SET = (
    "set [settings] raft_password or raft_password_file (or QUEEN_RAFT_PASSWORD / QUEEN_RAFT_PASSWORD_FILE), "
    "the same on every node; `queen-raft cluster up` writes one to {path} for a dev config"
)


def dev_password_path(config: ClusterConfig) -> Path:
    return config.data_dir / DEV_PASSWORD_FILE_NAME


def read_password_file(path: Path, where: str) -> str:
    try:
        password = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise ConfigError(f"{where}: the Raft password file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: the Raft password file {path} cannot be read: {exc}") from None
    if not password:
        raise ConfigError(f"{where}: the Raft password file {path} is empty")
    return password


def resolve_raft_password(config: ClusterConfig) -> ClusterConfig:
    """The config with settings.raft_password set, found as the module docstring says; a
    ConfigError, naming the settings and the file, when there is none."""
    settings = config.settings
    if settings.raft_password is not None:
        if not settings.raft_password.strip():
            raise ConfigError(f"{config.source}: raft_password is empty; " + _HOW_TO_SET.format(path=dev_password_path(config)))
        return config
    if settings.raft_password_file is not None:
        password = read_password_file(Path(settings.raft_password_file), config.source)
    elif dev_password_path(config).exists():
        password = read_password_file(dev_password_path(config), config.source)
    else:
        raise ConfigError(
            f"{config.source}: no Raft password (the peer protocol is pickle: without one, anyone who reaches a "
            "Raft port runs code in the node); " + _HOW_TO_SET.format(path=dev_password_path(config))
        )
    return replace(config, settings=replace(settings, raft_password=password))


def ensure_dev_raft_password(config: ClusterConfig) -> Path | None:
    """For `cluster up`: when the config names no password, make sure <data_dir>/raft-password
    holds one (written once, mode 0600, never replaced: restarted nodes must keep talking to each
    other). Returns that path, or None when the config names its own password."""
    settings = config.settings
    if settings.raft_password is not None or settings.raft_password_file is not None:
        return None
    path = dev_password_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _publish_new_password(path)
    read_password_file(path, config.source)  # refuse an empty or unreadable one now, not in every node
    return path


def _publish_new_password(path: Path) -> None:
    """Writes a random password to a temporary file (0600), fsyncs it, and links it into place: a
    reader never sees a partly written file, and of two launchers racing, one password wins."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(secrets.token_urlsafe(GENERATED_PASSWORD_BYTES) + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # another launcher's password is in place: every node reads that one
        log.info("wrote a new Raft password to %s", path)
    finally:
        os.unlink(temporary)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
