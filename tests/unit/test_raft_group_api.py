"""The seam between api/ and the Raft layer: TenantGroup, and the API tests' in-process stand-in for
it, offer every call of GroupApi with the same shape (async or not, the same parameters)."""

from __future__ import annotations

import inspect

import pytest

from queen_raft.raft import TenantGroup
from queen_raft.raft.group_api import GroupApi
from test_api_fake_group import FakeGroup

CALLS = [name for name, member in vars(GroupApi).items() if inspect.isfunction(member) and not name.startswith("_")]


def shape(function) -> tuple[bool, list[str]]:
    return inspect.iscoroutinefunction(function), list(inspect.signature(function).parameters)


def test_the_protocol_names_what_the_routes_call():
    assert sorted(CALLS) == ["peek_local", "peers_apply", "propose", "read", "status"]


@pytest.mark.parametrize("implementation", [TenantGroup, FakeGroup])
@pytest.mark.parametrize("name", CALLS)
def test_each_group_offers_each_call_with_the_protocols_shape(implementation, name):
    assert shape(getattr(implementation, name)) == shape(getattr(GroupApi, name))

