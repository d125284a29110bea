import math

import pytest
from pydantic import ValidationError

from deploy.replica.settings import DEFAULT_ADMIN_TOKEN, ServerSettings


def test_default_admin_token_is_refused_outside_local_mode():
    with pytest.raises(ValidationError, match="admin_token is the default"):
        ServerSettings(tracking_uri="http://127.0.0.1:1", model_name="m")


def test_default_admin_token_is_allowed_in_local_mode():
    s = ServerSettings(tracking_uri="http://127.0.0.1:1", model_name="m", local_mode=True)
    assert s.admin_token.get_secret_value() == DEFAULT_ADMIN_TOKEN
    assert s.host == "127.0.0.1"
    assert s.alias == "champion"


def test_settings_come_from_ratchet_env(monkeypatch):
    monkeypatch.setenv("RATCHET_TRACKING_URI", "http://127.0.0.1:5000")
    monkeypatch.setenv("RATCHET_MODEL_NAME", "toy")
    monkeypatch.setenv("RATCHET_ADMIN_TOKEN", "s3cret-token")
    monkeypatch.setenv("RATCHET_PORT", "8123")
    s = ServerSettings()
    assert (s.model_name, s.port, s.local_mode) == ("toy", 8123, False)
    assert "s3cret" not in repr(s)


def test_bounds_name_the_field():
    with pytest.raises(ValidationError, match="port"):
        ServerSettings(tracking_uri="x", model_name="m", local_mode=True, port=70000)
    with pytest.raises(ValidationError, match="max_body_bytes"):
        ServerSettings(tracking_uri="x", model_name="m", local_mode=True, max_body_bytes=1)


def test_engine_is_a_tagged_union_from_the_environment(monkeypatch):
    from deploy.replica.settings import TorchEngineConfig, VllmEngineConfig

    s = ServerSettings(tracking_uri="x", model_name="m", local_mode=True)
    assert isinstance(s.engine, TorchEngineConfig) and s.engine.max_batch == 32
    monkeypatch.setenv("RATCHET_ENGINE", '{"type": "vllm", "url": "http://127.0.0.1:8100", '
                       '"served_model": "champion"}')
    s = ServerSettings(tracking_uri="x", model_name="m", local_mode=True)
    assert isinstance(s.engine, VllmEngineConfig) and s.engine.teacher_forced_experts
    monkeypatch.setenv("RATCHET_ENGINE", '{"type": "sglang"}')
    with pytest.raises(ValidationError, match="engine"):
        ServerSettings(tracking_uri="x", model_name="m", local_mode=True)
    monkeypatch.setenv("RATCHET_ENGINE", '{"type": "torch", "max_batch": 0}')
    with pytest.raises(ValidationError, match="max_batch"):
        ServerSettings(tracking_uri="x", model_name="m", local_mode=True)


@pytest.mark.parametrize("local_mode", [False, True])
@pytest.mark.parametrize("token", [DEFAULT_ADMIN_TOKEN, "x", "fifteen-chars-x"])
def test_weak_token_is_refused_off_loopback_even_in_local_mode(local_mode, token):
    with pytest.raises(ValidationError, match="admin_token"):
        ServerSettings(
            tracking_uri="x", model_name="m", host="0.0.0.0", admin_token=token,
            local_mode=local_mode,
        )


STRONG = "qBaKs6d3JF_7mbX2por9x9wEy9wAAL5p"  # secrets.token_urlsafe(24)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "example.internal"])
def test_strong_token_is_accepted_off_loopback(host):
    s = ServerSettings(tracking_uri="x", model_name="m", host=host, admin_token=STRONG)
    assert s.host == host


@pytest.mark.parametrize(
    "token",
    ["a" * 16, " a" * 8, "ab" * 12, "0123456789012345", "1234123412341234", "aaaaaaaabbbbbbbbcc"],
)
def test_low_entropy_token_is_refused_off_loopback(token):
    with pytest.raises(ValidationError, match="bits, fewer than 64"):
        ServerSettings(tracking_uri="x", model_name="m", host="0.0.0.0", admin_token=token)


@pytest.mark.parametrize("token", ["", " " * 16, "\t\n "])
def test_blank_token_is_refused_even_on_loopback(token):
    with pytest.raises(ValidationError, match="empty or blank"):
        ServerSettings(tracking_uri="x", model_name="m", admin_token=token)


def test_token_strength_estimate():
    from deploy.replica.settings import token_strength_bits

    assert token_strength_bits(" " * 16) == 0.0
    assert token_strength_bits("ab" * 8) == 16.0  # 1 bit per character, 16 characters
    assert token_strength_bits("0123456789" * 2) == pytest.approx(20 * math.log2(10))
    assert token_strength_bits(STRONG) > 100


def test_inference_keys_are_required_off_loopback_by_default():
    common = dict(tracking_uri="x", model_name="m", admin_token=STRONG)
    assert ServerSettings(**common, host="0.0.0.0").keys_required
    assert not ServerSettings(**common, host="127.0.0.1").keys_required
    assert ServerSettings(**common, host="127.0.0.1", require_api_key=True).keys_required
    assert not ServerSettings(**common, host="0.0.0.0", require_api_key=False).keys_required


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_keeps_local_mode_default(host):
    s = ServerSettings(tracking_uri="x", model_name="m", host=host, local_mode=True)
    assert s.admin_token.get_secret_value() == DEFAULT_ADMIN_TOKEN


def test_router_refuses_a_weak_token_off_loopback():
    from deploy.fleet.router import RouterSettings

    with pytest.raises(ValidationError, match="not loopback"):
        RouterSettings(stable_urls=["http://x"], host="0.0.0.0", local_mode=True)
    with pytest.raises(ValidationError, match="not loopback"):
        RouterSettings(stable_urls=["http://x"], host="0.0.0.0", admin_token="short")
    with pytest.raises(ValidationError, match="bits"):
        RouterSettings(stable_urls=["http://x"], host="0.0.0.0", admin_token=" " * 16)
    assert RouterSettings(stable_urls=["http://x"], local_mode=True).host == "127.0.0.1"


def test_vllm_engine_is_external_or_managed():
    from deploy.replica.settings import VllmEngineConfig

    with pytest.raises(ValidationError, match="required unless engine.managed"):
        VllmEngineConfig(url="http://127.0.0.1:8100")
    managed = VllmEngineConfig(managed=True, dtype="float32")
    assert managed.url is None and managed.dtype == "float32"
    with pytest.raises(ValidationError, match="dtype"):
        VllmEngineConfig(managed=True, dtype="float16")


def test_managed_vllm_follows_the_replicas_loaded_version(tmp_path):
    """A managed engine owns a ManagedVllm whose source is the host's loaded version (what
    /admin/reload loaded and checked); before the first load it waits, then says why."""
    from deploy.replica.engines import loaded_checkpoint, make_engine
    from deploy.replica.engines.vllm_engine import ManagedVllm, VllmEngine
    from deploy.replica.model_host import ModelHost
    from deploy.replica.settings import VllmEngineConfig

    host = ModelHost(tracking_uri="http://127.0.0.1:9", model_name="m", cache_dir=tmp_path)
    engine = make_engine(VllmEngineConfig(managed=True, dtype="float32"), host)
    assert isinstance(engine, VllmEngine) and isinstance(engine.server, ManagedVllm)
    assert engine.server.dtype == "float32" and engine.server.workdir == tmp_path / "vllm"
    with pytest.raises(LookupError, match="loaded no version"):
        loaded_checkpoint(host, wait_s=0.3)()


def test_every_replica_setting_is_documented():
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "API.md").read_text()
    missing = [n for n in ServerSettings.model_fields if f"`RATCHET_{n.upper()}`" not in doc]
    assert missing == []
