"""Bounds that depend on each other are asserted where they are defined, when the module loads.

Each case names the module and the bounds one of its module-level asserts must relate; the test
finds that assert in the module's source (so deleting it fails here) and evaluates it against the
module's values (so it holds).
"""

import ast
import importlib
import inspect

import pytest

CASES = {
    "body below the entry bound": ("queen_raft.raft.settings", {"HTTP_MAX_BODY_CEILING", "MAX_ENTRY_BYTES"}),
    "entry below the append batch": ("queen_raft.raft.settings", {"APPEND_ENTRIES_BATCH_SIZE_BYTES", "MAX_ENTRY_BYTES"}),
    "peer frame cap holds an append": ("queen_raft.raft.settings",
                                       {"MAX_PEER_FRAME_BYTES", "APPEND_ENTRIES_BATCH_SIZE_BYTES", "MAX_ENTRY_BYTES"}),
    "election ceiling is the connection timeout": ("queen_raft.raft.settings",
                                                   {"ELECTION_MAX_CEILING_S", "CONNECTION_TIMEOUT_S"}),
    "remembered settlements above a pop batch": ("queen_raft.state.limits", {"MAX_REMEMBERED_SETTLEMENTS", "MAX_POP_BATCH"}),
    "deliverAt fits int64": ("queen_raft.state.limits", {"MAX_INSTANT_MS", "MAX_DELAY_MS"}),
    "an option's instant fits int64": ("queen_raft.state.limits", {"MAX_INSTANT_MS", "QUEUE_INT_OPTION_MAX"}),
    "the default fire policy is legal": ("queen_raft.state.limits", {"DEFAULT_FIRE_POLICY", "POLICY_KEYS", "MAX_POLICY_VALUE"}),
    "settings table and dataclass agree": ("queen_raft.config_settings", {"SETTING_SPECS", "Settings"}),
}


def module_asserts(module) -> list[ast.Assert]:
    tree = ast.parse(inspect.getsource(module))
    return [node for node in tree.body if isinstance(node, ast.Assert)]


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_dependent_bounds_are_asserted_at_import_and_hold(case):
    module_name, bounds = CASES[case]
    module = importlib.import_module(module_name)
    found = [node for node in module_asserts(module) if bounds <= names_in(node.test)]
    assert found, f"{module_name} has no module-level assert relating {sorted(bounds)}"
    for node in found:
        expression = compile(ast.Expression(node.test), module_name, "eval")
        assert eval(expression, vars(module)), f"{case}: {ast.unparse(node.test)}"


def test_the_election_ceiling_check_matches_raft_settings():
    from queen_raft.config import ConfigError, parse_config
    from queen_raft.raft.settings import CONNECTION_TIMEOUT_S

    from tests.unit.test_config import minimal

    raw = minimal()
    raw["settings"] = {"election_max_s": CONNECTION_TIMEOUT_S + 0.5}
    with pytest.raises(ConfigError, match="election_max_s must be <="):
        parse_config(raw, env={})
