"""The client's TLS context for https:// node URLs."""

from __future__ import annotations

import os
import ssl

CACERT_ENV = "QUEEN_CACERT"


def client_ssl_context(cafile: str | None = None) -> ssl.SSLContext:
    """Verifies the nodes' certificates (host name or IP SAN) against `cafile`, else the file named
    by QUEEN_CACERT, else the system's trust store; TLS 1.2 or newer."""
    cafile = cafile or os.environ.get(CACERT_ENV) or None
    context = ssl.create_default_context(cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
