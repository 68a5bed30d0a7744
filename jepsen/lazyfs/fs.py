"""The lazy filesystem's FUSE operations: a passthrough to a backing directory that keeps a Ledger.

Every operation goes to the backing directory at once (reads see what was written, as with a page
cache); before anything changes, the ledger records what it was (ledger.py). The kernel turns an
msync(MS_SYNC) of a shared mapping and an fdatasync of a mapped file alike into the dirty pages'
WRITEs followed by one FSYNC (datasync) of the file, so the journal's mmap + fdatasync reaches
`fsync` here like any write + fsync. A directory's fsync arrives as `fsyncdir`.

The backing directory stands for the disk: nothing here fsyncs it (the host's own crash is not the
fault being modelled), which also keeps the filesystem fast.
"""

from __future__ import annotations

import errno
import os
import threading

import mfusepy

from jepsen.lazyfs.ledger import HIDDEN, Ledger

STAT_FIELDS = ("st_atime_ns", "st_ctime_ns", "st_gid", "st_mode", "st_mtime_ns", "st_nlink", "st_size", "st_uid",
               "st_ino", "st_blocks", "st_blksize")


class LazyFS(mfusepy.Operations):
    use_ns = True

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.ledger = Ledger(self.root)
        self._mutex = threading.Lock()  # one operation at a time: the ledger reads before it writes

    def _path(self, path: str) -> str:
        relative = path.lstrip("/")
        if relative.split("/", 1)[0] == HIDDEN:
            raise mfusepy.FuseOSError(errno.ENOENT)
        return os.path.join(self.root, relative)

    def _parent(self, path: str) -> str:
        return os.path.dirname(self._path(path).rstrip("/")) or self.root

    # -- reading -----------------------------------------------------------------------------------

    def getattr(self, path, fh=None):
        st = os.fstat(fh) if fh is not None else os.lstat(self._path(path))
        attrs = {name.replace("_ns", ""): getattr(st, name) for name in STAT_FIELDS}
        return attrs

    def readdir(self, path, fh):
        names = os.listdir(self._path(path))
        if path == "/":
            names = [name for name in names if name != HIDDEN]
        return [".", ".."] + names

    def readlink(self, path):
        return os.readlink(self._path(path))

    def statfs(self, path):
        st = os.statvfs(self._path(path))
        return {key: getattr(st, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                  "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def access(self, path, amode):
        if not os.access(self._path(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    # -- files -------------------------------------------------------------------------------------

    def open(self, path, flags):
        # Read-write always, so the ledger can read a page before it is overwritten; no O_APPEND
        # (the kernel gives each write its offset); O_TRUNC goes through the ledger first.
        backing_flags = (flags & ~(os.O_WRONLY | os.O_APPEND | os.O_TRUNC | os.O_CREAT | os.O_EXCL)) | os.O_RDWR
        fd = os.open(self._path(path), backing_flags)
        if flags & os.O_TRUNC:
            with self._mutex:
                self.ledger.before_resize(fd, 0)
                os.ftruncate(fd, 0)
        return fd

    def create(self, path, mode, fi=None):
        with self._mutex:
            self.ledger.before_dir_change(self._parent(path))
            return os.open(self._path(path), os.O_RDWR | os.O_CREAT, mode)

    def write(self, path, data, offset, fh):
        with self._mutex:
            self.ledger.before_write(fh, offset, len(data))
            return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        fd = fh if fh is not None else os.open(self._path(path), os.O_RDWR)
        try:
            with self._mutex:
                self.ledger.before_resize(fd, length)
                os.ftruncate(fd, length)
        finally:
            if fh is None:
                os.close(fd)
        return 0

    def fallocate(self, path, mode, offset, size, fh):
        if mode:
            raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
        with self._mutex:
            self.ledger.before_resize(fh)
            os.posix_fallocate(fh, offset, size)
        return 0

    def fsync(self, path, datasync, fh):
        with self._mutex:
            self.ledger.file_synced(fh)
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        with self._mutex:
            self.ledger.file_closed(fh)
        os.close(fh)
        return 0

    def chmod(self, path, mode):
        os.chmod(self._path(path), mode)
        return 0

    def chown(self, path, uid, gid):
        os.lchown(self._path(path), uid, gid)
        return 0

    def utimens(self, path, times=None):
        os.utime(self._path(path), ns=times, follow_symlinks=False)
        return 0

    # -- names -------------------------------------------------------------------------------------

    def mkdir(self, path, mode):
        with self._mutex:
            self.ledger.before_dir_change(self._parent(path))
            os.mkdir(self._path(path), mode)
        return 0

    def symlink(self, target, source):
        with self._mutex:
            self.ledger.before_dir_change(self._parent(target))
            os.symlink(source, self._path(target))
        return 0

    def link(self, target, source):
        with self._mutex:
            self.ledger.before_dir_change(self._parent(target))
            os.link(self._path(source), self._path(target))
        return 0

    def unlink(self, path):
        with self._mutex:
            self.ledger.before_dir_change(self._parent(path))
            self.ledger.before_remove(self._path(path))
            os.unlink(self._path(path))
        return 0

    def rmdir(self, path):
        with self._mutex:
            if os.listdir(self._path(path)):
                raise mfusepy.FuseOSError(errno.ENOTEMPTY)
            self.ledger.before_dir_change(self._parent(path))
            if not self.ledger.before_remove(self._path(path)):
                os.rmdir(self._path(path))
        return 0

    def rename(self, old, new):
        with self._mutex:
            self.ledger.before_dir_change(self._parent(old))
            self.ledger.before_dir_change(self._parent(new))
            target = self._path(new)
            if os.path.lexists(target):
                if os.path.isdir(target) and os.listdir(target):
                    raise mfusepy.FuseOSError(errno.ENOTEMPTY)
                self.ledger.before_remove(target)
            os.rename(self._path(old), target)
        return 0

    def fsyncdir(self, path, datasync, fh):
        with self._mutex:
            self.ledger.dir_synced(self._path(path))
        return 0
