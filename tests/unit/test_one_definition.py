"""A name the API, the config and the Raft layer share is defined once: they import the state's
(or one small module's) definition instead of writing their own copy that could drift."""

from queen_raft import config, hosts
from queen_raft.api import body, messages, timer_parsing, timers
from queen_raft.raft import loopback
from queen_raft.state import limits, message_items, zstd_bounded


def test_the_api_uses_the_state_wire_constants():
    assert messages.DEFAULT_PARTITION is limits.DEFAULT_PARTITION
    assert timer_parsing.DEFAULT_PARTITION is limits.DEFAULT_PARTITION
    assert messages.MAX_POP_BATCH is limits.MAX_POP_BATCH
    assert messages.ACK_STATUSES is message_items.ACK_STATUSES


def test_one_bounded_zstd_decompression():
    assert body.decompress_bounded is zstd_bounded.decompress_bounded
    assert timers.decompress_bounded is zstd_bounded.decompress_bounded
    # The route's own helper says what it does differently: it answers the refusal as an HTTP error.
    assert timers.decompressed_or_refused is not zstd_bounded.decompress_bounded


def test_one_loopback_test():
    assert config.is_loopback_host is hosts.is_loopback_host
    assert loopback.is_loopback_host is hosts.is_loopback_host
    assert hosts.is_loopback_host("[::1]") and hosts.is_loopback_host("::1") and hosts.is_loopback_host("localhost")
    assert not hosts.is_loopback_host("10.0.0.5") and not hosts.is_loopback_host("[2001:db8::1]")
