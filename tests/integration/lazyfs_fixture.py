"""The lazy filesystem (jepsen/lazyfs/) for tests: why it cannot run here, if it cannot, and a
pytest fixture that mounts a fresh one over a temporary backing directory and unmounts it after."""

from __future__ import annotations

import os

import pytest

from jepsen.lazyfs.mount import LazyMount, lazyfs_unavailable

UNAVAILABLE = lazyfs_unavailable() or (None if os.geteuid() == 0 else "FUSE mounts here need root")
NEEDS_LAZYFS = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"lazy filesystem unavailable: {UNAVAILABLE}")


@pytest.fixture
def lazy(tmp_path):
    mount = LazyMount(tmp_path / "disk", tmp_path / "mnt", tmp_path / "lazyfs.log")
    mount.mount()
    yield mount
    mount.close()
