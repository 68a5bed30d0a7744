"""The checks behind `cluster up`: whose /health counts as "up", and the port probe."""

from __future__ import annotations

import socket

from queen_raft.cli.cluster_checks import answers_as_ours, port_free, port_holder


def test_only_our_node_of_our_cluster_counts_as_up():
    ours = {"status": "healthy", "node": "n1", "cluster": "single", "groups": {}}
    assert answers_as_ours(200, ours, "n1", "single")
    assert not answers_as_ours(200, {**ours, "cluster": "local-3"}, "n1", "single")  # another cluster's n1
    assert not answers_as_ours(200, {**ours, "node": "n2"}, "n1", "single")
    assert not answers_as_ours(200, {k: v for k, v in ours.items() if k != "cluster"}, "n1", "single")
    assert not answers_as_ours(503, ours, "n1", "single")
    assert not answers_as_ours(0, None, "n1", "single")


def test_a_listening_port_is_not_free_and_its_holder_is_this_process():
    import os
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert not port_free("127.0.0.1", port)
        assert port_holder(port).startswith(f"pid {os.getpid()}:")
    assert port_free("127.0.0.1", port)
