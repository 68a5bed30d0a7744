"""Encryption at rest, queue configure, and the operator's pause switch."""

from __future__ import annotations

import base64

import pytest
import zstandard

from queen_raft.api.encryption import PayloadCipher, PayloadDecryptError
from test_api_fake_group import ApiHarness

KEY = "11" * 32
ENV = {"QUEEN_ENCRYPTION_KEY": KEY}


def schedule(key="k", queue="secret", payload=b'{"card":"4111"}', **extra):
    return {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": 0, "txn": f"t-{key}",
            "payload": base64.b64encode(payload).decode(), **extra}


def test_cipher_round_trip_fresh_nonces_and_wrong_key():
    cipher = PayloadCipher(KEY)
    first, second = cipher.encrypt(b"hello"), cipher.encrypt(b"hello")
    assert first != second and b"hello" not in first
    assert cipher.decrypt(first) == b"hello"
    with pytest.raises(PayloadDecryptError):
        PayloadCipher("22" * 32).decrypt(first)
    with pytest.raises(PayloadDecryptError):
        cipher.decrypt(b"short")


async def configure_encrypted(api: ApiHarness, queue: str = "secret") -> None:
    status, _, body = await api.call("POST", "/api/v1/configure", json={"queue": queue, "options": {"encryptionEnabled": True}})
    assert status == 200 and body["options"]["encryptionEnabled"] is True


async def test_timer_for_an_encrypting_queue_is_stored_encrypted_and_popped_plain():
    async with ApiHarness(env=ENV) as api:
        await configure_encrypted(api)
        status, _, _ = await api.call("POST", "/api/v1/timers", json=[schedule("later", delayMs=60_000)])
        assert status == 200
        _, _, peek = await api.call("GET", "/api/v1/timers/secret/later", token="acme-ro")
        stored = base64.b64decode(peek["payload"])
        assert peek["encrypted"] is True and b"4111" not in stored  # peek never decrypts
        status, _, _ = await api.call("POST", "/api/v1/timers", json=[schedule("now")])
        stored_records = api.groups["acme"].state.fetch("secret", "Default", 0, 10)
        assert stored_records[0]["encrypted"] is True and b"4111" not in stored_records[0]["payload"]
        status, _, popped = await api.call("GET", "/api/v1/pop/queue/secret")
        assert popped["messages"][0]["payload"] == {"card": "4111"}


async def test_client_encrypted_flag_refused_for_an_encrypting_queue_only():
    async with ApiHarness(env=ENV) as api:
        await configure_encrypted(api)
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule(encrypted=True)])
        assert (status, body["error"]) == (400, "timers_bad_request")
        assert api.groups["acme"].state.counters()["pendingTimers"] == 0
        status, _, _ = await api.call("POST", "/api/v1/timers", json=[schedule(queue="plain", encrypted=True, delayMs=60_000)])
        assert status == 200


async def test_zstd_payload_for_an_encrypting_queue_is_decompressed_before_encryption():
    async with ApiHarness(env=ENV) as api:
        await configure_encrypted(api)
        compressed = zstandard.ZstdCompressor().compress(b'{"z":1}')
        status, _, _ = await api.call("POST", "/api/v1/timers", json=[schedule(payload=compressed, payloadZstd=True)])
        assert status == 200
        _, _, popped = await api.call("GET", "/api/v1/pop/queue/secret")
        assert popped["messages"][0]["payload"] == {"z": 1}
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule("bad", payload=b"not zstd", payloadZstd=True)])
        assert (status, body["error"]) == (400, "timers_bad_request")


async def test_push_to_an_encrypting_queue_round_trips_and_fetch_decrypts():
    async with ApiHarness(env=ENV) as api:
        await configure_encrypted(api)
        status, _, _ = await api.call("POST", "/api/v1/push", json={"items": [{"queue": "secret", "payload": {"pin": 1234}}]})
        assert status == 201
        assert b"1234" not in api.groups["acme"].state.fetch("secret", "Default", 0, 1)[0]["payload"]
        _, _, fetched = await api.call("POST", "/api/v1/fetch", token="acme-ro", json={"entries": [{"queue": "secret"}]})
        assert fetched["entries"][0]["records"][0]["payload"] == {"pin": 1234}


async def test_configure_encryption_on_a_node_without_a_key_is_400():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/configure", json={"queue": "secret", "options": {"encryptionEnabled": True}})
        assert (status, body["error"]) == (400, "bad_request") and "QUEEN_ENCRYPTION_KEY" in body["message"]
        assert api.groups["acme"].state.queue_options("secret") is None


async def test_encrypting_queue_without_a_key_is_503_elsewhere_not_stored_plain():
    async with ApiHarness() as api:
        # Configured through another node (one with the key), after this one started.
        api.groups["acme"]._apply({"op": "configure", "queue": "secret", "options": {"encryptionEnabled": True}, "mode": "merge"})
        status, headers, body = await api.call("POST", "/api/v1/timers", json=[schedule()])
        assert (status, body["error"], headers["Retry-After"]) == (503, "encryption_unavailable", "1")
        status, _, body = await api.call("POST", "/api/v1/push", json={"items": [{"queue": "secret", "payload": 1}]})
        assert (status, body["error"]) == (503, "encryption_unavailable")
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"operations": [{"type": "push", "queue": "secret", "payload": 1}]})
        assert (status, body["error"]) == (503, "encryption_unavailable")
        assert api.groups["acme"].state.counters()["pendingTimers"] == 0
        assert api.groups["acme"].state.fetch("secret") == []


@pytest.mark.parametrize("body", [[], {"queue": ""}, {"queue": "q", "options": []}, {"queue": "q", "mode": "patch"},
                                  {"queue": "q", "options": {"colour": 1}}, {"queue": "q", "x": 1}])
async def test_bad_configure_is_400(body):
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/configure", json=body)
        assert (status, answer["error"]) == (400, "bad_request")


async def test_configure_needs_read_write_or_admin():
    async with ApiHarness() as api:
        for token in ("acme-ro", "acme-wo"):
            status, _, _ = await api.call("POST", "/api/v1/configure", token=token, json={"queue": "q", "options": {}})
            assert status == 403


async def test_pause_and_resume_are_admin_only_and_gate_scheduling():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/admin/timers/pause", token="acme-rw")
        assert (status, body["error"]) == (403, "forbidden")
        status, _, body = await api.call("POST", "/api/v1/admin/timers/pause", token="acme-admin")
        assert (status, body) == (200, {"tenant": "acme", "paused": True})
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule(queue="q")])
        assert (status, body["error"]) == (503, "timers_disabled")
        status, _, _ = await api.call("POST", "/api/v1/timers", token="globex-rw", json=[schedule(queue="q")])
        assert status == 200  # another tenant is not paused
        status, _, body = await api.call("POST", "/api/v1/admin/timers/resume", token="acme-admin")
        assert body["paused"] is False
        status, _, _ = await api.call("POST", "/api/v1/timers", json=[schedule(queue="q")])
        assert status == 200
