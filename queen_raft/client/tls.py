"""The client's TLS context for https:// node URLs (queen_raft/tls_trust.py)."""

from queen_raft.tls_trust import CACERT_ENV, client_ssl_context

__all__ = ["CACERT_ENV", "client_ssl_context"]
