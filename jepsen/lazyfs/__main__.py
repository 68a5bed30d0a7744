"""`python -m jepsen.lazyfs BACKING MOUNTPOINT`: mount the lazy filesystem in the foreground.

It reads commands on stdin, one a line: `power-off` (or `power-off torn <seed>`) arms a power loss;
the harness then unmounts it (fusermount3 -u), and once the kernel has handed over its last dirty
pages and the mount is gone, what was never made durable is dropped from the backing directory and
the outcome printed as one JSON line (`{"power_off": {...}}`). Without it, an unmount keeps
everything (a clean shutdown). `ready` is printed once the mount answers.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading

import mfusepy

from jepsen.lazyfs.fs import LazyFS


def _read_commands(armed: dict) -> None:
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["power-off"]:
            armed["torn"] = random.Random(words[2]) if words[1:2] == ["torn"] and len(words) > 2 else None
            armed["power_off"] = True
            print(json.dumps({"armed": True}), flush=True)


def _announce_when_mounted(mountpoint: str) -> None:
    while not os.path.ismount(mountpoint):
        threading.Event().wait(0.01)
    print(json.dumps({"ready": True}), flush=True)


def main(argv: list[str]) -> int:
    backing, mountpoint = (os.path.abspath(path) for path in argv[:2])
    operations = LazyFS(backing)
    armed: dict = {"power_off": False}
    threading.Thread(target=_read_commands, args=(armed,), daemon=True).start()
    threading.Thread(target=_announce_when_mounted, args=(mountpoint,), daemon=True).start()
    mfusepy.FUSE(operations, mountpoint, foreground=True, nothreads=False)
    if armed["power_off"]:
        report = operations.ledger.power_off(armed.get("torn"))
        print(json.dumps({"power_off": report.to_json()}), flush=True)
    else:
        operations.ledger.settle()
        print(json.dumps({"unmounted": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
