"""The lazy filesystem alone (jepsen/lazyfs/), one test per rule of its model (jepsen/README.md).

Each test mounts a fresh lazy filesystem over a temporary backing directory, does what a node does,
powers it off, mounts it again and reads what survived. They need root and /dev/fuse (CI runs as
root); elsewhere they are skipped, saying why.
"""

from __future__ import annotations

import mmap
import os

import pytest

from jepsen.lazyfs.mount import LazyMount
from lazyfs_fixture import NEEDS_LAZYFS, lazy  # noqa: F401  (lazy is a fixture)

pytestmark = NEEDS_LAZYFS



def _fsync(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path, data: bytes, sync: bool, flags: int = os.O_CREAT | os.O_WRONLY | os.O_TRUNC) -> None:
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _power_cycle(lazy: LazyMount) -> dict:
    report = lazy.power_off()
    lazy.mount()
    return report


def _durable_file(lazy, name: str, data: bytes):
    path = lazy.mountpoint / name
    _write(path, data, sync=True)
    _fsync(lazy.mountpoint)
    return path


def test_data_written_without_fsync_is_dropped_back_to_the_synced_contents_and_length(lazy):
    path = _durable_file(lazy, "f", b"A" * 5000)
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, b"B" * 100, 10)
    os.pwrite(fd, b"C" * 3000, 5000)  # grows the file past its synced length
    os.close(fd)
    assert path.read_bytes()[10:12] == b"BB" and path.stat().st_size == 8000  # visible before the power loss
    report = _power_cycle(lazy)
    assert path.read_bytes() == b"A" * 5000
    assert report["bytes_truncated"] == 3000 and report["pages_reverted"] == 2  # pages 0 and 1 (bytes 4096-4999)


def test_fsync_and_fdatasync_make_written_data_durable(lazy):
    first = _durable_file(lazy, "f", b"old")
    second = _durable_file(lazy, "g", b"old")
    _write(first, b"new by fsync", sync=True)
    fd = os.open(second, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"new by fdatasync")
    os.fdatasync(fd)
    os.close(fd)
    _power_cycle(lazy)
    assert first.read_bytes() == b"new by fsync"
    assert second.read_bytes() == b"new by fdatasync"


def test_a_shared_mapping_is_durable_after_msync_and_lost_without_it(lazy):
    synced = _durable_file(lazy, "synced", bytes(8192))
    unsynced = _durable_file(lazy, "unsynced", bytes(8192))
    for path, flush in ((synced, True), (unsynced, False)):
        with open(path, "r+b") as f:
            mapped = mmap.mmap(f.fileno(), 0)
            mapped[4096:4101] = b"hello"
            if flush:
                mapped.flush()  # msync(MS_SYNC)
            mapped.close()
    _power_cycle(lazy)
    assert synced.read_bytes()[4096:4101] == b"hello"
    assert unsynced.read_bytes() == bytes(8192)


def test_a_created_file_is_durable_only_after_its_directory_is_fsynced(lazy):
    kept = lazy.mountpoint / "kept"
    lost = lazy.mountpoint / "lost"
    _write(kept, b"k", sync=True)
    _fsync(lazy.mountpoint)
    _write(lost, b"data synced, name not", sync=True)
    (lazy.mountpoint / "subdir").mkdir()
    _power_cycle(lazy)
    assert sorted(os.listdir(lazy.mountpoint)) == ["kept"]
    assert kept.read_bytes() == b"k"


def test_a_rename_is_undone_without_the_directory_fsync_and_kept_with_it(lazy):
    _durable_file(lazy, "journal", b"old journal")
    _write(lazy.mountpoint / "journal.tmp", b"new journal", sync=True)
    os.replace(lazy.mountpoint / "journal.tmp", lazy.mountpoint / "journal")
    assert (lazy.mountpoint / "journal").read_bytes() == b"new journal"
    _power_cycle(lazy)
    assert sorted(os.listdir(lazy.mountpoint)) == ["journal"]
    assert (lazy.mountpoint / "journal").read_bytes() == b"old journal"
    _write(lazy.mountpoint / "journal.tmp", b"new journal", sync=True)
    os.replace(lazy.mountpoint / "journal.tmp", lazy.mountpoint / "journal")
    _fsync(lazy.mountpoint)
    _power_cycle(lazy)
    assert sorted(os.listdir(lazy.mountpoint)) == ["journal"]
    assert (lazy.mountpoint / "journal").read_bytes() == b"new journal"


def test_a_rename_across_directories_needs_both_directories_fsynced(lazy):
    (lazy.mountpoint / "a").mkdir()
    (lazy.mountpoint / "b").mkdir()
    _write(lazy.mountpoint / "a" / "f", b"f", sync=True)
    for directory in ("a", "b", "."):
        _fsync(lazy.mountpoint / directory)
    os.rename(lazy.mountpoint / "a" / "f", lazy.mountpoint / "b" / "f")
    _fsync(lazy.mountpoint / "b")  # the new name is durable; the old one was never removed durably
    _power_cycle(lazy)
    assert (lazy.mountpoint / "a" / "f").read_bytes() == b"f"
    assert (lazy.mountpoint / "b" / "f").read_bytes() == b"f"


def test_an_unlink_is_undone_without_the_directory_fsync(lazy):
    path = _durable_file(lazy, "meta", b"term 7")
    _write(path, b"term 8, never synced", sync=False)
    os.unlink(path)
    assert not path.exists()
    _power_cycle(lazy)
    assert path.read_bytes() == b"term 7"
    os.unlink(path)
    _fsync(lazy.mountpoint)
    _power_cycle(lazy)
    assert not path.exists()


def test_a_directory_made_and_never_fsynced_in_its_parent_is_lost_with_its_synced_files(lazy):
    group = lazy.mountpoint / "tenant"
    group.mkdir()
    _write(group / "raft.journal", b"records", sync=True)
    _fsync(group)  # the journal's own directory is synced, its parent never was
    _power_cycle(lazy)
    assert not group.exists()
    group.mkdir()
    _write(group / "raft.journal", b"records", sync=True)
    _fsync(group)
    _fsync(lazy.mountpoint)
    _power_cycle(lazy)
    assert (group / "raft.journal").read_bytes() == b"records"


def test_a_clean_unmount_keeps_everything(lazy):
    path = lazy.mountpoint / "f"
    _write(path, b"never synced", sync=False)
    lazy.close()
    lazy.mount()
    assert path.read_bytes() == b"never synced"


def test_a_torn_power_off_keeps_some_unsynced_pages_and_zeroes_others(lazy):
    path = _durable_file(lazy, "f", b"")
    _write(path, b"x" * (4096 * 64), sync=False, flags=os.O_WRONLY)
    report = lazy.power_off(torn_seed=1)
    lazy.mount()
    data = path.read_bytes()
    pages = [data[i:i + 4096] for i in range(0, len(data), 4096)]
    assert len(data) == 4096 * 64
    assert {page for page in pages} == {b"x" * 4096, bytes(4096)}
    assert report["pages_kept_torn"] == sum(page == b"x" * 4096 for page in pages)


def test_the_ledger_directory_is_hidden(lazy):
    assert os.listdir(lazy.mountpoint) == []
    assert not (lazy.mountpoint / ".lazyfs").exists()
