"""Tokens and levels (docs/spec.md section 7), the rate bucket, ids and payload codecs."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from aiohttp.test_utils import make_mocked_request

from queen_raft.api.auth import ALLOWED_LEVELS, Access, authenticate, authorize
from queen_raft.api.codec import PayloadDecodeError, decode_base64, json_value_to_bytes, payload_fields
from queen_raft.api.errors import ApiError
from queen_raft.api import ids
from queen_raft.api.ids import uuid7, uuid7_batch
from queen_raft.api.rate_limit import TenantRateLimiter
from test_api_fake_group import TOKENS, cluster_config


def request_with(header: str | None):
    headers = {} if header is None else {"Authorization": header}
    return make_mocked_request("GET", "/", headers=headers)


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic acme-rw", "Bearer acme-rw-typo", "acme-rw"])
def test_missing_or_unknown_token_is_401(header):
    with pytest.raises(ApiError) as refused:
        authenticate(cluster_config(), request_with(header))
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")


def test_token_names_tenant_level_and_sub():
    principal = authenticate(cluster_config(), request_with("Bearer globex-wo"))
    assert (principal.tenant, principal.level) == ("globex", "write-only")
    assert principal.sub and principal.sub != authenticate(cluster_config(), request_with("bearer globex-rw")).sub


LEVEL_MATRIX = {
    # level: (produce, read, consume, admin)
    "admin": (True, True, True, True),
    "read-write": (True, True, True, False),
    "read-only": (False, True, False, False),
    "write-only": (True, False, False, False),
}


@pytest.mark.parametrize("level", sorted(LEVEL_MATRIX))
def test_level_matrix(level):
    principal = authenticate(cluster_config(), request_with(f"Bearer {TOKENS['acme'][level]}"))
    for access, allowed in zip((Access.PRODUCE, Access.READ, Access.CONSUME, Access.ADMIN), LEVEL_MATRIX[level]):
        if allowed:
            authorize(principal, access)
        else:
            with pytest.raises(ApiError) as refused:
                authorize(principal, access)
            assert (refused.value.status, refused.value.code) == (403, "forbidden")
    assert all(level in ALLOWED_LEVELS[a] for a, ok in zip(Access, LEVEL_MATRIX[level]) if ok)


def test_rate_bucket_refills_and_says_when():
    now = [100.0]
    limiter = TenantRateLimiter(rate_per_s=2.0, burst=2, monotonic=lambda: now[0])
    assert limiter.take("acme") == 0.0 and limiter.take("acme") == 0.0
    wait = limiter.take("acme")
    assert wait == pytest.approx(0.5)
    assert limiter.take("globex") == 0.0  # per tenant
    now[0] += 0.5
    assert limiter.take("acme") == 0.0
    assert limiter.take("acme") > 0


def test_rate_zero_disables_the_limit():
    limiter = TenantRateLimiter(rate_per_s=0)
    assert all(limiter.take("acme") == 0.0 for _ in range(10_000))


def test_uuid7_layout_and_order():
    first, second = uuid7(1_700_000_000_000), uuid7(1_700_000_000_001)
    parsed = uuid.UUID(first)
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert int(parsed.hex[:12], 16) == 1_700_000_000_000
    assert first < second
    assert len({uuid7(5) for _ in range(1000)}) == 1000


def test_uuid7_batch_ids_are_uuid7s_of_one_instant_and_distinct():
    batch = uuid7_batch(256, 1_700_000_000_123)
    assert len(set(batch)) == 256
    for text in batch:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # the canonical lower-case 8-4-4-4-12 form
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert int(parsed.hex[:12], 16) == 1_700_000_000_123
    assert uuid7_batch(0) == []


@pytest.mark.parametrize("count", [1, 2, ids.STRIDED_FROM_IDS - 1, ids.STRIDED_FROM_IDS, 204])
def test_uuid7_batch_cuts_the_same_text_uuid7_builds_from_the_same_bytes(monkeypatch, count):
    """The batch is cut from the pool's hex (id by id below STRIDED_FROM_IDS, digit position by
    position from it on); each id must be what the integer form makes of its bytes."""
    pool = bytes(range(256)) * 4 + bytes(range(255, -1, -1)) * 4
    monkeypatch.setattr(ids.os, "urandom", lambda n: pool[:n])
    batch = uuid7_batch(count, 1_700_000_000_123)
    assert len(batch) == count
    expected = [ids._uuid7_text(1_700_000_000_123, int.from_bytes(pool[i:i + ids.RANDOM_BYTES_PER_ID], "big"))
                for i in range(0, len(batch) * ids.RANDOM_BYTES_PER_ID, ids.RANDOM_BYTES_PER_ID)]
    assert batch == expected


def test_base64_is_strict():
    assert decode_base64("eyJoaSI6MX0=") == b'{"hi":1}'
    assert decode_base64("") == b""
    for bad in ("eyJoaSI6MX0", "ey J", "é", 5, None):
        with pytest.raises(PayloadDecodeError):
            decode_base64(bad)


def test_payload_fields_json_or_b64():
    assert payload_fields(json_value_to_bytes({"a": "é"})) == {"payload": {"a": "é"}}
    assert payload_fields(json_value_to_bytes(None)) == {"payload": None}
    assert payload_fields(b"\xff\xfe") == {"payloadB64": "//4="}
    assert payload_fields(b"not json") == {"payloadB64": "bm90IGpzb24="}
    assert json_value_to_bytes({"a": 1}) == b'{"a":1}'


def test_payload_fields_never_answer_nan_or_infinity_as_json():
    """Python's json reads NaN and Infinity; they are not JSON, and an answer holding one is not
    valid JSON: such bytes go out as payloadB64 like any other non-JSON payload."""
    for raw in (b"NaN", b"-Infinity", b"[1, Infinity]", b'{"a": NaN}', b"\xef\xbb\xbf1"):
        fields = payload_fields(raw)
        assert fields == {"payloadB64": base64.b64encode(raw).decode("ascii")}, raw
        json.loads(json.dumps(fields, allow_nan=False))
    assert payload_fields(b" [1.5e3, -0] ") == {"payload": [1500.0, 0]}


def test_a_known_header_is_answered_from_the_cache_for_its_own_config_only():
    """The second call with a header answers the same principal without hashing again; another
    config (same header) is checked against its own tokens, so a token it lacks is a 401 there."""
    from queen_raft.api import auth

    config = cluster_config()
    first = authenticate(config, request_with("Bearer acme-rw"))
    hashed = []
    original = type(config).find_token

    def counting_find_token(self, token):
        hashed.append(token)
        return original(self, token)

    try:
        type(config).find_token = counting_find_token
        assert authenticate(config, request_with("Bearer acme-rw")) == first
        assert hashed == []
        other = cluster_config()
        assert authenticate(other, request_with("Bearer acme-rw")) == first
        assert hashed == ["acme-rw"]
        object.__setattr__(other, "tokens_by_sha256", {})  # a config that does not know the token
        auth._principal_by_header.clear()
        authenticate(config, request_with("Bearer acme-rw"))
        with pytest.raises(ApiError) as refused:
            authenticate(other, request_with("Bearer acme-rw"))
        assert refused.value.status == 401
    finally:
        type(config).find_token = original


def test_unknown_headers_are_never_cached():
    from queen_raft.api import auth

    auth._principal_by_header.clear()
    config = cluster_config()
    for header in ("Bearer nope", "Basic acme-rw", ""):
        with pytest.raises(ApiError):
            authenticate(config, request_with(header))
    assert auth._principal_by_header == {}


def test_the_cache_is_bounded(monkeypatch):
    from queen_raft.api import auth

    monkeypatch.setattr(auth, "PRINCIPAL_CACHE_MAX", 3)
    auth._principal_by_header.clear()
    config = cluster_config()
    for spaces in range(1, 8):  # spellings of one token: "Bearer acme-rw", "Bearer  acme-rw", ...
        authenticate(config, request_with("Bearer" + " " * spaces + "acme-rw"))
        assert len(auth._principal_by_header) <= 3
