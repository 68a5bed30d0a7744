"""What is not durable yet on a lazy filesystem, and what a power loss turns it back into.

The backing directory always holds the current contents (every operation passes through at once).
The ledger remembers, for everything changed since it was last made durable, what it was then:

- a file's data and length: before the first write, truncate or fallocate since the file's last
  fsync/fdatasync, its length; before the first write into each 4 KiB page, the page's bytes. An
  fsync or fdatasync of the file forgets them (now durable).
- a directory's entries: before the first create, mkdir, link, unlink, rmdir or rename that changes
  it since its last fsync, the names it held and the inode each name pointed to. An fsync of the
  directory forgets them.

A file that loses its last name while some remembered directory still names it is kept by a hard
link under `.lazyfs/keep/<inode>` (a removed directory is moved there), so that a power loss can
put it back. `power_off` restores every file's remembered pages and length, then every remembered
directory's entries (undoing creates, unlinks and renames), and deletes what no durable directory
names. With `torn`, each unsynced page instead reaches the disk or not by a draw, as when the disk
wrote back part of the page cache before the power went.

Attributes (mode, owner, times) and the data of a file that is never written are not modelled.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field

PAGE_BYTES = 4096
# The ledger's own directory in the backing root; the mounted filesystem never shows it.
HIDDEN = ".lazyfs"


@dataclass
class FileUndo:
    durable_size: int
    pages: dict[int, bytes] = field(default_factory=dict)  # page index -> its durable bytes


@dataclass
class PowerOffReport:
    files_reverted: int = 0
    pages_reverted: int = 0
    pages_kept_torn: int = 0
    bytes_truncated: int = 0
    entries_removed: int = 0
    entries_restored: int = 0
    unrestorable: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(self.__dict__)


class Ledger:
    """The undo records of one backing directory. Not thread-safe: the filesystem holds a lock."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.files: dict[int, FileUndo] = {}
        self.dirs: dict[int, dict[str, tuple[int, bool]]] = {}
        hidden = os.path.join(self.root, HIDDEN)
        shutil.rmtree(hidden, ignore_errors=True)  # what is on disk at mount is durable
        self.keep = os.path.join(hidden, "keep")
        os.makedirs(self.keep)
        self.root_inode = os.lstat(self.root).st_ino

    # -- data --------------------------------------------------------------------------------------

    def _file(self, fd: int) -> tuple[int, FileUndo]:
        st = os.fstat(fd)
        undo = self.files.get(st.st_ino)
        if undo is None:
            undo = self.files[st.st_ino] = FileUndo(st.st_size)
        return st.st_ino, undo

    def _save_pages(self, fd: int, undo: FileUndo, start: int, end: int) -> None:
        end = min(end, undo.durable_size)
        for page in range(start // PAGE_BYTES, -(-end // PAGE_BYTES)):
            if page not in undo.pages:
                at = page * PAGE_BYTES
                undo.pages[page] = os.pread(fd, min(PAGE_BYTES, undo.durable_size - at), at)

    def before_write(self, fd: int, offset: int, length: int) -> None:
        _, undo = self._file(fd)
        self._save_pages(fd, undo, offset, offset + length)

    def before_resize(self, fd: int, length: int | None = None) -> None:
        """Before a truncate (length) or an fallocate (None): a shrink loses the pages past it."""
        _, undo = self._file(fd)
        if length is not None:
            self._save_pages(fd, undo, length, undo.durable_size)

    def file_synced(self, fd: int) -> None:
        self.files.pop(os.fstat(fd).st_ino, None)

    def file_closed(self, fd: int) -> None:
        st = os.fstat(fd)
        if st.st_nlink == 0:  # gone for good: its inode number may be reused
            self.files.pop(st.st_ino, None)

    # -- names -------------------------------------------------------------------------------------

    def _listing(self, directory: str) -> dict[str, tuple[int, bool]]:
        is_root = os.path.samefile(directory, self.root)
        with os.scandir(directory) as entries:
            return {entry.name: _identity(entry) for entry in entries if not (is_root and entry.name == HIDDEN)}

    def before_dir_change(self, directory: str) -> None:
        inode = os.lstat(directory).st_ino
        if inode not in self.dirs:
            self.dirs[inode] = self._listing(directory)

    def _named_durably(self, inode: int) -> bool:
        return any(entry[0] == inode for listing in self.dirs.values() for entry in listing.values())

    def before_remove(self, path: str) -> bool:
        """Before `path` loses its name (unlink, rmdir, or replaced by a rename). True when the
        ledger moved a directory away itself (the caller then does not rmdir it)."""
        st = os.lstat(path)
        is_dir = os.path.isdir(path) and not os.path.islink(path)
        if self._named_durably(st.st_ino):
            kept = os.path.join(self.keep, str(st.st_ino))
            if is_dir:
                os.rename(path, kept)
                return True
            if st.st_nlink == 1 and not os.path.lexists(kept):
                os.link(path, kept, follow_symlinks=False)
        elif is_dir:
            self.dirs.pop(st.st_ino, None)
        elif st.st_nlink == 1:
            self.files.pop(st.st_ino, None)
        return False

    def dir_synced(self, directory: str) -> None:
        self.dirs.pop(os.lstat(directory).st_ino, None)
        for name in os.listdir(self.keep):
            inode = int(name)
            if self._named_durably(inode):
                continue
            path = os.path.join(self.keep, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
                self.dirs.pop(inode, None)
            else:
                os.unlink(path)
                self.files.pop(inode, None)

    def settle(self) -> None:
        """A clean unmount: everything is durable now; the ledger's own directory goes."""
        shutil.rmtree(os.path.join(self.root, HIDDEN), ignore_errors=True)
        self.files.clear()
        self.dirs.clear()

    # -- power loss --------------------------------------------------------------------------------

    def _index(self) -> dict[int, str]:
        """inode -> one current path, under the root and in keep (not in stage)."""
        found: dict[int, str] = {}
        for top in (self.root, self.keep):
            for here, dirs, files in os.walk(top):
                if here == self.root:
                    dirs[:] = [d for d in dirs if d != HIDDEN]
                for name in dirs + files:
                    path = os.path.join(here, name)
                    found.setdefault(os.lstat(path).st_ino, path)
        found.setdefault(self.root_inode, self.root)
        return found

    def power_off(self, torn: random.Random | None = None) -> PowerOffReport:
        """Turn the backing directory into what a power loss now would leave; then forget it all."""
        report = PowerOffReport()
        index = self._index()
        for inode, undo in self.files.items():
            path = index.get(inode)
            if path is not None and not os.path.isdir(path):
                self._revert_file(path, undo, torn, report)
        self._revert_names(index, report)
        shutil.rmtree(os.path.join(self.root, HIDDEN))
        os.makedirs(self.keep)
        self.files.clear()
        self.dirs.clear()
        return report

    def _revert_file(self, path: str, undo: FileUndo, torn: random.Random | None, report: PowerOffReport) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            keep_size = undo.durable_size
            if torn is not None and size > undo.durable_size:
                # Pages past the durable length: each one reached the disk, or reads as zeros.
                for page in range(undo.durable_size // PAGE_BYTES, -(-size // PAGE_BYTES)):
                    at = max(page * PAGE_BYTES, undo.durable_size)
                    end = min((page + 1) * PAGE_BYTES, size)
                    if torn.random() < 0.5:
                        report.pages_kept_torn += 1
                    else:
                        os.pwrite(fd, bytes(end - at), at)
                keep_size = size
            if size > keep_size:
                report.bytes_truncated += size - keep_size
            os.ftruncate(fd, keep_size)
            for page, data in sorted(undo.pages.items()):
                if torn is not None and torn.random() < 0.5:
                    report.pages_kept_torn += 1
                    continue
                os.pwrite(fd, data, page * PAGE_BYTES)
                report.pages_reverted += 1
        finally:
            os.close(fd)
        report.files_reverted += 1

    def _revert_names(self, index: dict[int, str], report: PowerOffReport) -> None:
        stage = os.path.join(self.root, HIDDEN, "stage")
        os.makedirs(stage)
        for listing in self.dirs.values():
            for inode, is_dir in listing.values():
                staged = os.path.join(stage, str(inode))
                if not is_dir and inode in index and not os.path.lexists(staged):
                    os.link(index[inode], staged, follow_symlinks=False)
        fds = {inode: os.open(index[inode], os.O_RDONLY | os.O_DIRECTORY) for inode in self.dirs if inode in index}
        stage_fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY)
        keep_fd = os.open(self.keep, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for inode, fd in fds.items():
                self._remove_undurable(fd, inode == self.root_inode, self.dirs[inode], stage_fd, report)
            for inode, fd in fds.items():
                self._restore_durable(fd, self.dirs[inode], stage_fd, keep_fd, report)
        finally:
            for fd in list(fds.values()) + [stage_fd, keep_fd]:
                os.close(fd)

    def _remove_undurable(self, fd: int, is_root: bool, durable: dict, stage_fd: int, report: PowerOffReport) -> None:
        with os.scandir(fd) as entries:
            current = [(entry.name,) + _identity(entry) for entry in entries]
        for name, inode, is_dir in current:
            if (is_root and name == HIDDEN) or durable.get(name, (None,))[0] == inode:
                continue
            if is_dir:
                os.rename(name, str(inode), src_dir_fd=fd, dst_dir_fd=stage_fd)
            else:
                try:
                    os.link(name, str(inode), src_dir_fd=fd, dst_dir_fd=stage_fd, follow_symlinks=False)
                except FileExistsError:
                    pass
                os.unlink(name, dir_fd=fd)
            report.entries_removed += 1

    def _restore_durable(self, fd: int, durable: dict, stage_fd: int, keep_fd: int, report: PowerOffReport) -> None:
        for name, (inode, is_dir) in durable.items():
            try:
                if os.stat(name, dir_fd=fd, follow_symlinks=False).st_ino == inode:
                    continue
            except FileNotFoundError:
                pass
            for source_fd in (stage_fd, keep_fd):
                try:
                    if is_dir:
                        os.rename(str(inode), name, src_dir_fd=source_fd, dst_dir_fd=fd)
                    else:
                        os.link(str(inode), name, src_dir_fd=source_fd, dst_dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                report.entries_restored += 1
                break
            else:
                report.unrestorable.append(name)


def _identity(entry: os.DirEntry) -> tuple[int, bool]:
    """(inode, is a directory) from lstat: a readdir's d_ino can differ from st_ino (overlayfs)."""
    st = entry.stat(follow_symlinks=False)
    return st.st_ino, entry.is_dir(follow_symlinks=False)
