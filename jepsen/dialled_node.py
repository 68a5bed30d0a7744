"""Launches `queen-raft node` with a dial map for every tenant group, for nodes whose config does
not take one yet.

The Raft layer already accepts `dial_map` (peer Raft address -> the address to dial instead); what
a node's config may not have is a key to pass it. Until it does, the harness starts the node through
this module: it wraps the group constructor the node module calls so that each group receives the
map from JEPSEN_DIAL_MAP (JSON), then runs the node's own CLI unchanged. Nothing else of the node
is touched. The run's notes say when this launcher was used.
"""

from __future__ import annotations

import json
import os
import sys

DIAL_MAP_ENV = "JEPSEN_DIAL_MAP"


def main() -> int:
    dial_map = json.loads(os.environ.get(DIAL_MAP_ENV) or "{}")
    import queen_raft.node as node_module
    from queen_raft.cli import main as queen_main

    group_class = node_module.TenantGroup

    def dialled_group(*args, **kwargs):
        kwargs.setdefault("dial_map", dial_map)
        return group_class(*args, **kwargs)

    node_module.TenantGroup = dialled_group
    return queen_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
