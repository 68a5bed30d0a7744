"""The `[settings]` of a cluster's configuration: every setting, its `QUEEN_*` variable, its default
and its check (docs/spec.md section 6), and the parse of the table and the environment into Settings.

config.py reads the rest of the file (nodes, tenants, tokens) and re-exports what is here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Mapping

ENCRYPTION_KEY_RE = re.compile(r"^[0-9a-fA-F]{64}$")  # AES-256: 32 bytes as hex
MIB = 1024 * 1024
# pysyncobj requires connectionTimeout >= raftMaxTimeout: this is the Raft connection timeout
# (raft/settings.py CONNECTION_TIMEOUT_S, asserted equal there).
ELECTION_MAX_CEILING_S = 3.5
HTTP_MAX_BODY_CEILING = 6 * MIB  # see http_max_body_bytes below
# The default pending-timer quota of every tenant, sized to memory: the heap one pending timer
# takes on every node (its row, its place in the due index and the table; the benches measure
# 459-463 B, so 500 leaves headroom) into the memory a tenant's pending timers may take on each
# node. Without a quota a producer can schedule until the nodes run out of memory. The million-
# timer benches fit; a node serving many tenants, or a bigger machine, sets timers_max_pending
# (for all tenants) or a tenant's own `timers_max_pending` in [[tenants]].
TIMER_MEMORY_BYTES = 500
TIMERS_MEMORY_BUDGET_BYTES = 1024 * MIB
DEFAULT_TIMERS_MAX_PENDING = TIMERS_MEMORY_BUDGET_BYTES // TIMER_MEMORY_BYTES


class ConfigError(ValueError):
    """A configuration the node refuses to start with; the message names the key and the source."""


def _parse_int(text: str) -> int:
    return int(text.strip().replace("_", ""))


def _parse_float(text: str) -> float:
    return float(text.strip())


def _parse_str(text: str) -> str:
    return text


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(text)


def _parse_optional_int(text: str) -> int | None:
    """`none`, `off` or an empty value mean "no limit"."""
    stripped = text.strip().lower()
    if stripped in ("", "none", "off", "unlimited"):
        return None
    return _parse_int(stripped)


@dataclass(frozen=True)
class _SettingSpec:
    key: str  # in [settings]
    env: str  # its QUEEN_* variable
    default: Any
    parse_env: Callable[[str], Any]
    check: Callable[[Any], str | None]  # an error text, or None when the value is good
    # The key and variable an earlier configuration named this setting by, still accepted.
    old_key: str | None = None
    old_env: str | None = None


def _int_at_least(minimum: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if value < minimum:
            return f"must be >= {minimum}"
        return None

    return check


def _optional_int_at_least(minimum: int) -> Callable[[Any], str | None]:
    inner = _int_at_least(minimum)
    return lambda value: None if value is None else inner(value)


def _positive_float(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a number"
    if value <= 0:
        return "must be > 0"
    return None


def _non_negative_number(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a number"
    if value < 0:
        return "must be >= 0"
    return None


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}"


def _optional_str(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else "must be a string"


def _bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _encryption_key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not ENCRYPTION_KEY_RE.match(value):
        return "must be 64 hex characters (an AES-256 key)"
    return None


# Every setting, its QUEEN_* variable and its default (the defaults are those of docs/spec.md).
SETTING_SPECS: tuple[_SettingSpec, ...] = (
    # Raft and the tick
    _SettingSpec("timer_tick_ms", "QUEEN_RAFT_TIMER_TICK_MS", 50, _parse_int, _int_at_least(0)),
    _SettingSpec("timer_min_gap_ms", "QUEEN_RAFT_TIMER_MIN_GAP_MS", 5, _parse_int, _int_at_least(0)),
    _SettingSpec("timer_fire_batch", "QUEEN_RAFT_TIMER_FIRE_BATCH", 256, _parse_int, _int_at_least(1)),
    # During a backlog each full tick doubles the next one's batch up to this (queen_raft/raft/fire_batch.py).
    _SettingSpec("timer_fire_batch_max", "QUEEN_RAFT_TIMER_FIRE_BATCH_MAX", 4096, _parse_int, _int_at_least(1)),
    _SettingSpec("timer_fire_max_bytes", "QUEEN_RAFT_TIMER_FIRE_MAX_BYTES", 4 * MIB, _parse_int, _int_at_least(1)),
    _SettingSpec("commit_timeout_ms", "QUEEN_RAFT_COMMIT_TIMEOUT_MS", 5000, _parse_int, _int_at_least(1)),
    _SettingSpec("fsync", "QUEEN_RAFT_FSYNC", "group", _parse_str, _one_of("group", "off")),
    # The Raft peer password, or a file holding it; a node starts only with one (peer_password.py).
    _SettingSpec("raft_password", "QUEEN_RAFT_PASSWORD", None, _parse_str, _optional_str),
    _SettingSpec("raft_password_file", "QUEEN_RAFT_PASSWORD_FILE", None, _parse_str, _optional_str),
    # An inbound Raft connection that has not proven the password and named its node by then is closed.
    _SettingSpec("raft_handshake_timeout_s", "QUEEN_RAFT_HANDSHAKE_TIMEOUT_S", 5.0, _parse_float, _positive_float),
    # Election timing: with these, a new leader takes about 0.3 s (pysyncobj's defaults take seconds).
    _SettingSpec("election_min_s", "QUEEN_RAFT_ELECTION_MIN_S", 0.2, _parse_float, _positive_float),
    _SettingSpec("election_max_s", "QUEEN_RAFT_ELECTION_MAX_S", 0.6, _parse_float, _positive_float),
    _SettingSpec("append_entries_period_s", "QUEEN_RAFT_APPEND_ENTRIES_PERIOD_S", 0.05, _parse_float, _positive_float),
    # An isolated leader steps down after this (pysyncobj's default of 30 s keeps it "leader" too long).
    _SettingSpec("leader_fallback_timeout_s", "QUEEN_RAFT_LEADER_FALLBACK_TIMEOUT_S", 2.5, _parse_float, _positive_float),
    _SettingSpec("connection_retry_s", "QUEEN_RAFT_CONNECTION_RETRY_S", 0.5, _parse_float, _positive_float),
    # Proposals in flight per group on this node: backpressure instead of an unbounded queue.
    # This and the compaction count default to queen_raft.raft.RaftSettings' measured values.
    _SettingSpec("max_in_flight", "QUEEN_RAFT_MAX_IN_FLIGHT", 2048, _parse_int, _int_at_least(1)),
    _SettingSpec("log_compaction_min_entries", "QUEEN_RAFT_LOG_COMPACTION_MIN_ENTRIES", 2000, _parse_int, _int_at_least(1)),
    # ...and once the log's commands hold at least this fraction of the last snapshot's bytes (0: off).
    _SettingSpec("log_compaction_log_to_snapshot_ratio", "QUEEN_RAFT_LOG_COMPACTION_LOG_TO_SNAPSHOT_RATIO", 0.5,
                 _parse_float, _non_negative_number),
    # The timer routes
    _SettingSpec("timers_max_ops_per_call", "QUEEN_TIMERS_MAX_OPS_PER_CALL", 256, _parse_int, _int_at_least(1)),
    # None ("none", "unlimited" in the environment) disables the quota.
    _SettingSpec("timers_max_pending", "QUEEN_TIMERS_MAX_PENDING", DEFAULT_TIMERS_MAX_PENDING, _parse_optional_int,
                 _optional_int_at_least(0)),
    _SettingSpec("timers_max_horizon_s", "QUEEN_TIMERS_MAX_HORIZON_S", 7_776_000, _parse_int, _int_at_least(0)),
    _SettingSpec("timers_max_payload_bytes", "QUEEN_TIMERS_MAX_PAYLOAD_BYTES", MIB, _parse_int, _int_at_least(0)),
    # Calls per second per tenant on each node (token bucket); 0 disables the limit.
    _SettingSpec("timers_rate", "QUEEN_TIMERS_RATE", 1000.0, _parse_float, _non_negative_number),
    # Bucket depth; 0 means one second's worth of the rate.
    _SettingSpec("timers_rate_burst", "QUEEN_TIMERS_RATE_BURST", 0, _parse_int, _int_at_least(0)),
    # A fire that fails (docs/spec.md section 2). The sweeper_* keys and QUEEN_SWEEPER_* variables
    # are read as aliases, so configurations that use them keep working (cluster_configs/README.md).
    _SettingSpec("timer_fire_max_attempts", "QUEEN_RAFT_TIMER_FIRE_MAX_ATTEMPTS", 5, _parse_int, _int_at_least(1),
                 "sweeper_max_attempts", "QUEEN_SWEEPER_MAX_ATTEMPTS"),
    _SettingSpec("timer_fire_backoff_min_ms", "QUEEN_RAFT_TIMER_FIRE_BACKOFF_MIN_MS", 1000, _parse_int, _int_at_least(0),
                 "sweeper_backoff_min_ms", "QUEEN_SWEEPER_BACKOFF_MIN_MS"),
    _SettingSpec("timer_fire_backoff_max_ms", "QUEEN_RAFT_TIMER_FIRE_BACKOFF_MAX_MS", 60_000, _parse_int, _int_at_least(0),
                 "sweeper_backoff_max_ms", "QUEEN_SWEEPER_BACKOFF_MAX_MS"),
    _SettingSpec("timer_fire_transient_backoff_ms", "QUEEN_RAFT_TIMER_FIRE_TRANSIENT_BACKOFF_MS", 1000, _parse_int,
                 _int_at_least(0), "sweeper_transient_backoff_ms", "QUEEN_SWEEPER_TRANSIENT_BACKOFF_MS"),
    # Encryption at rest (AES-256-GCM)
    _SettingSpec("encryption_key", "QUEEN_ENCRYPTION_KEY", None, _parse_str, _encryption_key),
    # HTTP: the largest request body. One call is one Raft entry, and queen_raft.raft refuses
    # entries over 8 MiB (pysyncobj's chunked path corrupts larger ones); a body's entry is never
    # larger than the body plus ids and framing, so 6 MiB leaves the room.
    _SettingSpec("http_max_body_bytes", "QUEEN_HTTP_MAX_BODY_BYTES", HTTP_MAX_BODY_CEILING, _parse_int,
                 lambda v: _int_at_least(1024)(v) or (None if v <= HTTP_MAX_BODY_CEILING else f"must be <= {HTTP_MAX_BODY_CEILING}")),
    # HTTP connections (queen_raft/api/connections.py): at most this many open at once; a new one
    # past it closes the longest-idle connection, or is answered 503 when every one is mid-request.
    _SettingSpec("http_max_connections", "QUEEN_HTTP_MAX_CONNECTIONS", 4096, _parse_int, _int_at_least(16)),
    # An idle keep-alive connection is closed after this long without a request.
    _SettingSpec("http_keepalive_timeout_s", "QUEEN_HTTP_KEEPALIVE_TIMEOUT_S", 60.0, _parse_float, _positive_float),
    # A request head (request line and headers) must arrive within this from its first byte.
    _SettingSpec("http_header_timeout_s", "QUEEN_HTTP_HEADER_TIMEOUT_S", 10.0, _parse_float, _positive_float),
    # A request body must arrive within this once its route reads it (408 past it).
    _SettingSpec("http_body_timeout_s", "QUEEN_HTTP_BODY_TIMEOUT_S", 30.0, _parse_float, _positive_float),
    # HTTPS (queen_raft/http_tls.py): PEM paths; with both set the node serves HTTPS only.
    _SettingSpec("http_tls_cert", "QUEEN_HTTP_TLS_CERT", None, _parse_str, _optional_str),
    _SettingSpec("http_tls_key", "QUEEN_HTTP_TLS_KEY", None, _parse_str, _optional_str),
    # Serve plain HTTP although an address is not loopback (a warning in the log, see http_tls.py).
    _SettingSpec("allow_plaintext_http", "QUEEN_ALLOW_PLAINTEXT_HTTP", False, _parse_bool, _bool),
)


@dataclass(frozen=True)
class Settings:
    timer_tick_ms: int = 50
    timer_min_gap_ms: int = 5
    timer_fire_batch: int = 256
    timer_fire_batch_max: int = 4096
    timer_fire_max_bytes: int = 4 * MIB
    commit_timeout_ms: int = 5000
    fsync: str = "group"
    raft_password: str | None = None
    raft_password_file: str | None = None
    raft_handshake_timeout_s: float = 5.0
    election_min_s: float = 0.2
    election_max_s: float = 0.6
    append_entries_period_s: float = 0.05
    leader_fallback_timeout_s: float = 2.5
    connection_retry_s: float = 0.5
    max_in_flight: int = 2048
    log_compaction_min_entries: int = 2000
    log_compaction_log_to_snapshot_ratio: float = 0.5
    timers_max_ops_per_call: int = 256
    timers_max_pending: int | None = DEFAULT_TIMERS_MAX_PENDING
    timers_max_horizon_s: int = 7_776_000
    timers_max_payload_bytes: int = MIB
    timers_rate: float = 1000.0
    timers_rate_burst: int = 0
    timer_fire_max_attempts: int = 5
    timer_fire_backoff_min_ms: int = 1000
    timer_fire_backoff_max_ms: int = 60_000
    timer_fire_transient_backoff_ms: int = 1000
    encryption_key: str | None = None
    http_max_body_bytes: int = 6 * MIB
    http_max_connections: int = 4096
    http_keepalive_timeout_s: float = 60.0
    http_header_timeout_s: float = 10.0
    http_body_timeout_s: float = 30.0
    http_tls_cert: str | None = None
    http_tls_key: str | None = None
    allow_plaintext_http: bool = False

    def fire_policy(self) -> dict[str, int]:
        """The settings that change what `apply` does; they travel in the command (docs/commands.md).

        The one place the policy is built: the routes send it with their schedules and the tick
        with its fires (RaftSettings.from_settings), so a fire backs off alike in both."""
        return {
            "fireBatch": self.timer_fire_batch,
            "fireMaxBytes": self.timer_fire_max_bytes,
            "maxAttempts": self.timer_fire_max_attempts,
            "backoffMinMs": self.timer_fire_backoff_min_ms,
            "backoffMaxMs": self.timer_fire_backoff_max_ms,
            "transientBackoffMs": self.timer_fire_transient_backoff_ms,
        }


assert {spec.key for spec in SETTING_SPECS} == {f.name for f in fields(Settings)}, "settings table and dataclass differ"
assert all(getattr(Settings(), spec.key) == spec.default for spec in SETTING_SPECS), "defaults differ"
assert Settings().timer_fire_batch <= Settings().timer_fire_batch_max, "the fire batch ceiling is below its base"


def _named_once(names: Mapping[str, Any], name: str, old_name: str | None, what: str, source: str) -> str | None:
    """Which of a setting's two names `names` holds (None: neither); both is refused."""
    if old_name is not None and old_name in names:
        if name in names:
            raise ConfigError(f"{source}: {what} names one setting twice: {name} and its old name {old_name}")
        return old_name
    return name if name in names else None


def _parse_settings(table: dict, env: Mapping[str, str], source: str) -> Settings:
    known = {spec.key for spec in SETTING_SPECS} | {spec.old_key for spec in SETTING_SPECS if spec.old_key}
    unknown = table.keys() - known
    if unknown:
        raise ConfigError(f"{source}: [settings] has unknown key(s) {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for spec in SETTING_SPECS:
        key = _named_once(table, spec.key, spec.old_key, "[settings]", source) or spec.key
        value = table.get(key, spec.default)
        where = f"[settings].{key}"
        env_name = _named_once(env, spec.env, spec.old_env, "the environment", source)
        if env_name is not None:
            where = f"environment {env_name}"
            try:
                value = spec.parse_env(env[env_name])
            except ValueError:
                raise ConfigError(f"{where}={env[env_name]!r} is not a valid value") from None
        if isinstance(spec.default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        problem = spec.check(value)
        if problem:
            raise ConfigError(f"{source}: {where} {problem}, got {value!r}")
        values[spec.key] = value
    settings = Settings(**values)
    if settings.election_max_s > ELECTION_MAX_CEILING_S:
        raise ConfigError(f"{source}: election_max_s must be <= {ELECTION_MAX_CEILING_S} (the Raft connection timeout)")
    if settings.election_min_s >= settings.election_max_s:
        raise ConfigError(f"{source}: election_min_s must be below election_max_s")
    # pysyncobj's validate(): raftMinTimeout > 3 x appendEntriesPeriod.
    if settings.election_min_s <= 3 * settings.append_entries_period_s:
        raise ConfigError(f"{source}: election_min_s must exceed 3 x append_entries_period_s")
    if settings.timer_fire_backoff_min_ms > settings.timer_fire_backoff_max_ms:
        raise ConfigError(f"{source}: timer_fire_backoff_min_ms must not exceed timer_fire_backoff_max_ms")
    return _fire_batch_ceiling_checked(settings, table, env, source)


def _fire_batch_ceiling_checked(settings: Settings, table: dict, env: Mapping[str, str], source: str) -> Settings:
    """The backlog ceiling must not be below the base fire batch. Named below it: refused. Left at
    its default below a larger configured base (a configuration written before the ceiling
    existed): the ceiling is the base, so the batch stays as configured and the node starts."""
    if settings.timer_fire_batch_max >= settings.timer_fire_batch:
        return settings
    if "timer_fire_batch_max" in table or "QUEEN_RAFT_TIMER_FIRE_BATCH_MAX" in env:
        raise ConfigError(f"{source}: timer_fire_batch_max must not be below timer_fire_batch")
    return replace(settings, timer_fire_batch_max=settings.timer_fire_batch)
