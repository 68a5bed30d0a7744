"""The pysyncobj recipe: every private member we override or read still exists in the pinned version,
with the signature and behaviour we copied; and the overrides do what they are for.

If pysyncobj is upgraded and one of these fails, re-read the recipe against the new source before
changing the test.

The checks are split by the layer they pin: test_raft_recipe_wire.py (TcpConnection, TCPTransport,
TcpServer), test_raft_recipe_syncobj.py (SyncObj and the overrides of its handler, tick and sends)
and test_raft_recipe_journal.py (FileJournal and the snapshot path). This module holds what they
share: the pinned version and how a member's signature and source are read.
"""

from __future__ import annotations

import inspect

PINNED_VERSION = "0.3.17"


def params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def source(fn) -> str:
    return inspect.getsource(fn)
