"""The cluster config: the dev files load, every QUEEN_* override applies, bad files are refused clearly."""

import copy
import hashlib
import tomllib
from pathlib import Path

import pytest

from queen_raft.config import (
    EMBEDDED_DEFAULT_CONFIG,
    LEVELS,
    SETTING_SPECS,
    ConfigError,
    Settings,
    load_config,
    parse_config,
)

DEV_CONFIGS = ["cluster_configs/local-3.toml", "cluster_configs/single.toml"]


def minimal(host: str = "127.0.0.1") -> dict:
    return {
        "cluster": {"name": "t", "data_dir": "data/q"},
        "nodes": [
            {"id": "n1", "host": host, "http_port": 6632, "raft_port": 7400},
            {"id": "n2", "host": host, "http_port": 6633, "raft_port": 7500},
        ],
        "tenants": [
            {"name": "acme", "tokens": [{"token": "acme-rw", "level": "read-write"}]},
            {"name": "globex", "tokens": [{"token_sha256": hashlib.sha256(b"g").hexdigest(), "level": "admin"}]},
        ],
    }


@pytest.mark.parametrize("path", DEV_CONFIGS)
def test_dev_configs_have_two_tenants_with_a_plaintext_token_of_every_level(path):
    config = load_config(path, env={})
    assert len(config.tenants) >= 2
    for tenant in config.tenants:
        levels = {t.level for t in tenant.tokens if t.plaintext}
        assert levels == set(LEVELS), tenant.name


def test_local3_is_three_loopback_nodes_on_6632_to_6634():
    config = load_config("cluster_configs/local-3.toml", env={})
    assert [n.http_port for n in config.nodes] == [6632, 6633, 6634]
    assert {n.host for n in config.nodes} == {"127.0.0.1"}


REPO_CONFIGS = Path(__file__).resolve().parents[2] / "cluster_configs"


def test_single_is_the_embedded_default():
    assert EMBEDDED_DEFAULT_CONFIG.name == "single.toml"
    config = load_config(None, env={})
    assert [(n.id, n.http_port) for n in config.nodes] == [("n1", 6632)]


def test_tenant_raft_port_and_data_dir_follow_the_tenant_place():
    config = parse_config(minimal(), env={})
    n2 = config.node("n2")
    assert n2.raft_addr(config.tenant("acme").index) == "127.0.0.1:7500"
    assert n2.raft_addr(config.tenant("globex").index) == "127.0.0.1:7501"
    assert str(config.group_data_dir("n2", "globex")) == "data/q/n2/globex"


def test_token_lookup_by_plaintext_and_by_hash():
    config = parse_config(minimal(), env={})
    rw = config.find_token("acme-rw")
    assert (rw.tenant, rw.level) == ("acme", "read-write")
    admin = config.find_token("g")
    assert (admin.tenant, admin.level) == ("globex", "admin")
    assert config.find_token("nope") is None
    assert config.find_token("") is None


def test_defaults_are_the_spec_defaults():
    s = parse_config(minimal(), env={}).settings
    assert s == Settings()
    assert (s.timer_tick_ms, s.timer_min_gap_ms, s.timer_fire_batch, s.timer_fire_max_bytes) == (50, 5, 256, 4 << 20)
    assert (s.commit_timeout_ms, s.fsync, s.timers_max_ops_per_call) == (5000, "group", 256)
    assert (s.timers_max_horizon_s, s.timers_max_payload_bytes) == (7_776_000, 1 << 20)
    assert (s.timer_fire_max_attempts, s.timer_fire_backoff_min_ms, s.timer_fire_backoff_max_ms,
            s.timer_fire_transient_backoff_ms) == (5, 1000, 60000, 1000)


ENV_CASES = {
    "QUEEN_RAFT_TIMER_TICK_MS": ("0", "timer_tick_ms", 0),
    "QUEEN_RAFT_TIMER_MIN_GAP_MS": ("7", "timer_min_gap_ms", 7),
    "QUEEN_RAFT_TIMER_FIRE_BATCH": ("16", "timer_fire_batch", 16),
    "QUEEN_RAFT_TIMER_FIRE_MAX_BYTES": ("1024", "timer_fire_max_bytes", 1024),
    "QUEEN_RAFT_COMMIT_TIMEOUT_MS": ("250", "commit_timeout_ms", 250),
    "QUEEN_RAFT_FSYNC": ("off", "fsync", "off"),
    "QUEEN_RAFT_PASSWORD": ("s3cret", "raft_password", "s3cret"),
    "QUEEN_TIMERS_MAX_OPS_PER_CALL": ("3", "timers_max_ops_per_call", 3),
    "QUEEN_TIMERS_MAX_PENDING": ("10", "timers_max_pending", 10),
    "QUEEN_TIMERS_MAX_HORIZON_S": ("60", "timers_max_horizon_s", 60),
    "QUEEN_TIMERS_MAX_PAYLOAD_BYTES": ("100", "timers_max_payload_bytes", 100),
    "QUEEN_TIMERS_RATE": ("2.5", "timers_rate", 2.5),
    "QUEEN_RAFT_TIMER_FIRE_MAX_ATTEMPTS": ("2", "timer_fire_max_attempts", 2),
    "QUEEN_RAFT_TIMER_FIRE_BACKOFF_MIN_MS": ("10", "timer_fire_backoff_min_ms", 10),
    "QUEEN_RAFT_TIMER_FIRE_BACKOFF_MAX_MS": ("2000", "timer_fire_backoff_max_ms", 2000),
    "QUEEN_RAFT_TIMER_FIRE_TRANSIENT_BACKOFF_MS": ("30", "timer_fire_transient_backoff_ms", 30),
    "QUEEN_ENCRYPTION_KEY": ("ab" * 32, "encryption_key", "ab" * 32),
}


@pytest.mark.parametrize("env_name", sorted(ENV_CASES))
def test_each_queen_variable_overrides_the_file(env_name):
    text, key, expected = ENV_CASES[env_name]
    raw = minimal()
    spec = next(s for s in SETTING_SPECS if s.env == env_name)
    assert spec.key == key
    settings = parse_config(raw, env={env_name: text}).settings
    assert getattr(settings, key) == expected


def test_every_setting_has_an_env_variable_and_a_toml_key():
    for spec in SETTING_SPECS:
        assert spec.env.startswith("QUEEN_")
        raw = minimal()
        raw["settings"] = {spec.key: spec.default}
        assert getattr(parse_config(raw, env={}).settings, spec.key) == spec.default


def test_env_beats_the_file():
    raw = minimal()
    raw["settings"] = {"timer_tick_ms": 20}
    assert parse_config(raw, env={}).settings.timer_tick_ms == 20
    assert parse_config(raw, env={"QUEEN_RAFT_TIMER_TICK_MS": "30"}).settings.timer_tick_ms == 30


def test_max_pending_none_means_unlimited():
    assert parse_config(minimal(), env={"QUEEN_TIMERS_MAX_PENDING": "none"}).settings.timers_max_pending is None


def test_fire_policy_travels_the_fire_settings():
    settings = parse_config(minimal(), env={"QUEEN_RAFT_TIMER_FIRE_MAX_ATTEMPTS": "3"}).settings
    assert settings.fire_policy() == {
        "fireBatch": 256, "fireMaxBytes": 4 << 20, "maxAttempts": 3,
        "backoffMinMs": 1000, "backoffMaxMs": 60000, "transientBackoffMs": 1000,
    }


def _mutate(fn):
    raw = minimal()
    fn(raw)
    return raw


BAD_CONFIGS = {
    "missing cluster": (lambda r: r.pop("cluster"), "missing cluster"),
    "unknown top key": (lambda r: r.update(extra={}), "unknown key"),
    "no nodes": (lambda r: r.update(nodes=[]), "at least one node"),
    "duplicate node id": (lambda r: r["nodes"][1].update(id="n1"), "unique"),
    "bad port": (lambda r: r["nodes"][0].update(http_port=70000), "http_port"),
    "port as string": (lambda r: r["nodes"][0].update(raft_port="7400"), "raft_port"),
    "raft port collides with http": (lambda r: r["nodes"][0].update(http_port=7501, raft_port=7500), "collides"),
    "tenant raft ports overlap": (lambda r: r["nodes"][1].update(raft_port=7401), "collides"),
    "node key typo": (lambda r: r["nodes"][0].update(htp_port=1), "unknown key"),
    "bad level": (lambda r: r["tenants"][0]["tokens"][0].update(level="root"), "level"),
    "both token forms": (lambda r: r["tenants"][0]["tokens"][0].update(token_sha256="a" * 64), "exactly one"),
    "no token form": (lambda r: r["tenants"][0]["tokens"][0].pop("token"), "exactly one"),
    "short hash": (lambda r: r["tenants"][1]["tokens"][0].update(token_sha256="abc"), "64 hex"),
    "same token twice": (lambda r: r["tenants"][1]["tokens"].append({"token": "acme-rw", "level": "admin"}), "twice"),
    "tenant without tokens": (lambda r: r["tenants"][0].update(tokens=[]), "at least one"),
    "duplicate tenant": (lambda r: r["tenants"][1].update(name="acme"), "unique"),
    "tenant name with slash": (lambda r: r["tenants"][0].update(name="a/b"), "must match"),
    "unknown setting": (lambda r: r.update(settings={"tick": 1}), "unknown key"),
    "negative tick": (lambda r: r.update(settings={"timer_tick_ms": -1}), ">= 0"),
    "bad fsync": (lambda r: r.update(settings={"fsync": "always"}), "group, off"),
    "short key": (lambda r: r.update(settings={"encryption_key": "abcd"}), "64 hex"),
    "election order": (lambda r: r.update(settings={"election_min_s": 1.0, "election_max_s": 0.5}), "below"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_configs_are_refused_with_a_message_naming_the_problem(case):
    mutate, words = BAD_CONFIGS[case]
    with pytest.raises(ConfigError, match=words):
        parse_config(_mutate(mutate), env={})


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError, match="QUEEN_RAFT_TIMER_TICK_MS"):
        parse_config(minimal(), env={"QUEEN_RAFT_TIMER_TICK_MS": "fast"})
    with pytest.raises(ConfigError, match="QUEEN_RAFT_FSYNC"):
        parse_config(minimal(), env={"QUEEN_RAFT_FSYNC": "always"})


def test_plaintext_tokens_refused_when_an_address_is_not_loopback():
    with pytest.raises(ConfigError, match="plaintext tokens"):
        parse_config(minimal(host="10.0.0.5"), env={"QUEEN_RAFT_PASSWORD": "x"})


def test_non_loopback_needs_a_raft_password():
    raw = minimal(host="10.0.0.5")
    raw["tenants"][0]["tokens"] = [{"token_sha256": "b" * 64, "level": "read-write"}]
    with pytest.raises(ConfigError, match="password"):
        parse_config(copy.deepcopy(raw), env={})
    config = parse_config(raw, env={"QUEEN_RAFT_PASSWORD": "x"})
    assert config.settings.raft_password == "x"


def test_localhost_and_ipv6_loopback_count_as_loopback():
    for host in ("localhost", "::1", "127.0.0.2"):
        assert parse_config(minimal(host=host), env={}).nodes[0].host == host


def test_unknown_node_id_is_a_clear_error():
    with pytest.raises(ConfigError, match="no node with id 'n9'"):
        parse_config(minimal(), env={}).node("n9")


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.toml", env={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[cluster\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(broken, env={})


def test_http_body_ceiling_keeps_an_entry_under_the_raft_cap():
    from queen_raft.raft.settings import MAX_ENTRY_BYTES

    assert Settings().http_max_body_bytes < MAX_ENTRY_BYTES
    with pytest.raises(ConfigError, match="QUEEN_HTTP_MAX_BODY_BYTES must be <="):
        parse_config(minimal(), env={"QUEEN_HTTP_MAX_BODY_BYTES": str(MAX_ENTRY_BYTES)})


def test_the_config_readme_documents_every_setting():
    text = (REPO_CONFIGS / "README.md").read_text()
    for spec in SETTING_SPECS:
        assert f"| `{spec.key}` | `{spec.env}` |" in text, spec.key


# -- [nodes.dial] ---------------------------------------------------------------------------------


def with_dial(dial: dict, node: int = 0, host: str = "127.0.0.1") -> dict:
    raw = minimal(host)
    raw["nodes"][node]["dial"] = dial
    return raw


def test_dial_key_is_the_peer_base_address_and_applies_to_every_tenant_offset():
    config = parse_config(with_dial({"127.0.0.1:7500": "127.0.0.1:19500"}), env={})
    n1, n2 = config.node("n1"), config.node("n2")
    acme, globex = config.tenant("acme").index, config.tenant("globex").index
    assert n1.dial_map(acme) == {n2.raft_addr(acme): "127.0.0.1:19500"}
    assert n1.dial_map(globex) == {n2.raft_addr(globex): "127.0.0.1:19501"}
    assert n2.dial_map(acme) == {} and n2.dial == ()


BAD_DIALS = {
    "own address": ({"127.0.0.1:7400": "127.0.0.1:19500"}, "peer's base Raft address"),
    "a tenant offset, not the base": ({"127.0.0.1:7501": "127.0.0.1:19500"}, "peer's base Raft address"),
    "unknown peer": ({"127.0.0.1:9999": "127.0.0.1:19500"}, "peer's base Raft address"),
    "peer spelled by another host name": ({"localhost:7500": "127.0.0.1:19500"}, "peer's base Raft address"),
    "target without port": ({"127.0.0.1:7500": "127.0.0.1"}, "host:port"),
    "target port not a number": ({"127.0.0.1:7500": "127.0.0.1:x"}, "host:port"),
    "target not a string": ({"127.0.0.1:7500": 19500}, "host:port"),
    "target port zero": ({"127.0.0.1:7500": "127.0.0.1:0"}, "1..65535"),
    "last tenant offset past 65535": ({"127.0.0.1:7500": "127.0.0.1:65535"}, "past 65535"),
    "target is a listening port": ({"127.0.0.1:7500": "127.0.0.1:6633"}, "listens on"),
    "target is another tenant's raft port": ({"127.0.0.1:7500": "127.0.0.1:7499"}, "listens on"),
}


@pytest.mark.parametrize("case", sorted(BAD_DIALS))
def test_bad_dial_maps_are_refused_naming_the_node_and_key(case):
    dial, words = BAD_DIALS[case]
    with pytest.raises(ConfigError, match=words) as refused:
        parse_config(with_dial(dial), env={})
    assert "node 'n1'" in str(refused.value)


def test_dial_must_be_a_table():
    with pytest.raises(ConfigError, match="dial must be a table"):
        parse_config(with_dial(["127.0.0.1:7500"]), env={})


def test_two_peers_may_not_share_a_dial_target():
    raw = minimal()
    raw["nodes"].append({"id": "n3", "host": "127.0.0.1", "http_port": 6634, "raft_port": 7600})
    # n2 takes 19500-19501 (two tenants); n3's 19501 overlaps it.
    raw["nodes"][0]["dial"] = {"127.0.0.1:7500": "127.0.0.1:19500", "127.0.0.1:7600": "127.0.0.1:19501"}
    with pytest.raises(ConfigError, match="also the dial target of 'n2'"):
        parse_config(raw, env={})
    raw["nodes"][0]["dial"]["127.0.0.1:7600"] = "127.0.0.1:19502"
    assert parse_config(raw, env={}).node("n1").dial_map(1)["127.0.0.1:7601"] == "127.0.0.1:19503"


def test_non_loopback_dial_target_needs_the_raft_password_and_refuses_plaintext_tokens():
    raw = with_dial({"127.0.0.1:7500": "10.0.0.9:19500"})
    with pytest.raises(ConfigError, match="plaintext tokens"):
        parse_config(copy.deepcopy(raw), env={"QUEEN_RAFT_PASSWORD": "x"})
    raw["tenants"][0]["tokens"] = [{"token_sha256": "b" * 64, "level": "read-write"}]
    with pytest.raises(ConfigError, match="dial target is not loopback"):
        parse_config(copy.deepcopy(raw), env={})
    config = parse_config(raw, env={"QUEEN_RAFT_PASSWORD": "x"})
    assert config.node("n1").dial_map(0) == {"127.0.0.1:7500": "10.0.0.9:19500"}


def test_the_config_readme_shape_parses_with_its_dial_example():
    text = (REPO_CONFIGS / "README.md").read_text()
    shape = text.split("## Shape", 1)[1].split("```toml", 1)[1].split("```", 1)[0]
    raw = tomllib.loads(shape.replace("<64 hex>", "a" * 64))
    config = parse_config(raw, env={})
    assert config.node("n1").dial_map(0) == {"127.0.0.1:7500": "127.0.0.1:19500"}
    assert "[nodes.dial]" in text
