"""Backups of a cluster's tenants (take.py) and seeding empty nodes from one (restore.py).

A backup directory holds one `<tenant>.snapshot` file per tenant (the bytes of
TenantState.snapshot(), as GET /api/v1/admin/snapshot answers them) and `manifest.json`
(manifest.py), which names the cluster, its node ids and tenants, and each file's sha256.
"""
