"""How this package verifies the nodes it calls over https://: the SDK, the CLI, and a node calling
its peers (the dashboard's overview). Outside the SDK package, so that a node imports it without
the SDK."""

from __future__ import annotations

import os
import ssl

CACERT_ENV = "QUEEN_CACERT"


def client_ssl_context(cafile: str | None = None) -> ssl.SSLContext:
    """Verifies the nodes' certificates (host name or IP SAN) against `cafile`, else the file named
    by QUEEN_CACERT, else the system's trust store; TLS 1.2 or newer. A CA file that cannot be
    read as PEM certificates is a ValueError naming it."""
    cafile = cafile or os.environ.get(CACERT_ENV) or None
    try:
        context = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot use the CA file {cafile} (cafile, --cacert or {CACERT_ENV}): {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
