"""Settings of one serving replica, read from ``RATCHET_*`` environment variables.

One typed model (pydantic-settings) with a docstring, bounds and a default on every field. It
refuses a default admin token unless ``local_mode`` is on, and a weak one whenever the bind address
is not loopback — ``local_mode`` included — so a replica reachable from other machines cannot be
reloaded by whoever reads this file or guesses the token. A token is weak when it is the default,
shorter than 16 characters, or carries less than 64 bits by ``token_strength_bits`` (so 16 spaces,
one character repeated, or a 16-digit number are refused). Inference needs a client key
(``require_api_key``) by default off loopback.

Deliberately left out: the fleet's own settings (deploy/fleet/fleet.py takes plain arguments) and
the
router's (deploy/fleet/router.py). Importing this module imports neither torch nor mlflow.
"""

from __future__ import annotations

import ipaddress
import math
import string
from collections import Counter
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_ADMIN_TOKEN = "changethis"
MIN_PUBLIC_TOKEN_CHARS = 16
"""Shortest admin token accepted on a non-loopback bind address."""
MIN_PUBLIC_TOKEN_BITS = 64.0
"""Least estimated strength (``token_strength_bits``) of an admin token off loopback."""
_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits)


def token_strength_bits(token: str) -> float:
    """A conservative estimate of a token's entropy in bits: its length times the smaller of
    (a) the Shannon entropy of its own character frequencies and (b) log2 of the size of the
    character classes it draws from (lower case 26, upper case 26, digits 10, anything else 33).
    Repeated characters score (a) = 0; a number or a lower-case word scores at most log2 10 or
    log2 26 per character. ``secrets.token_urlsafe(24)`` scores about 140."""
    if not token:
        return 0.0
    n = len(token)
    shannon = -sum(c / n * math.log2(c / n) for c in Counter(token).values())
    alphabet = sum(len(cls) for cls in _CLASSES if any(ch in cls for ch in token))
    if any(not any(ch in cls for cls in _CLASSES) for ch in token):
        alphabet += 33
    return max(0.0, n * min(shannon, math.log2(alphabet)))


def weak_token_reason(token: str) -> str | None:
    """Why ``token`` may not guard a replica reachable from other machines; None if it may."""
    if token == DEFAULT_ADMIN_TOKEN:
        return "it is the default 'changethis'"
    if len(token) < MIN_PUBLIC_TOKEN_CHARS:
        return f"it has {len(token)} characters, fewer than {MIN_PUBLIC_TOKEN_CHARS}"
    bits = token_strength_bits(token)
    if bits < MIN_PUBLIC_TOKEN_BITS:
        return (
            f"it carries about {bits:.0f} bits, fewer than {MIN_PUBLIC_TOKEN_BITS:.0f} (repeated "
            "characters or a small alphabet); generate one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(24))'`"
        )
    return None


def is_loopback(host: str) -> bool:
    """``host`` is a loopback address (or ``localhost``): only this machine can connect."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost may resolve to anything
        return False


class TorchEngineConfig(BaseModel):
    """The embedded engine (deploy/replica/engines/torch_engine.py): the served checkpoint in this
    process, with a dynamic batcher across callers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["torch"] = "torch"
    max_batch: int = Field(
        default=32, ge=1, le=256, description="Most sequences decoded together in one batch."
    )
    max_wait_ms: float = Field(
        default=2.0,
        ge=0.0,
        le=1000.0,
        description="How long the batcher waits for more requests after the first one arrives.",
    )


class VllmEngineConfig(BaseModel):
    """A vLLM OpenAI server (deploy/replica/engines/vllm_engine.py; contract in ENGINES.md): an
    external
    one at ``url``, or with ``managed`` a child process the replica starts on the checkpoint it
    loaded and restarts on ``/admin/reload``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["vllm"] = "vllm"
    managed: bool = Field(
        default=False,
        description="Start and own a vLLM child (its venv: `make test-vllm` bootstraps "
        ".cache/vllm-venv) on the replica's loaded checkpoint; a reload restarts it.",
    )
    url: str | None = Field(
        default=None, min_length=1,
        description="Base URL of an external vLLM server, e.g. http://127.0.0.1:8100.",
    )
    served_model: str | None = Field(
        default=None, min_length=1,
        description="The model name the external vLLM serves (its --served-model-name or path).",
    )
    venv: str | None = Field(default=None, description="Managed: the vLLM venv (default "
                             ".cache/vllm-venv).")
    dtype: Literal["bfloat16", "float32"] = Field(
        default="bfloat16", description="Managed: the dtype vLLM computes in (float32 matches "
        "the trainer's recompute within 1e-5; bfloat16 within 0.22 on a tiny MoE, ENGINES.md).",
    )
    timeout_s: float = Field(default=120.0, gt=0.0, description="Per-request timeout.")
    teacher_forced_experts: bool = Field(
        default=True,
        description="Recompute routed experts with a teacher-forced pass of the checkpoint this "
        "replica loaded (vLLM's CPU build does not return them); off: source 'none'.",
    )

    @model_validator(mode="after")
    def _external_or_managed(self) -> VllmEngineConfig:
        if not self.managed and (self.url is None or self.served_model is None):
            raise ValueError("engine.url and engine.served_model are required unless "
                             "engine.managed is true")
        return self


EngineConfig = Annotated[TorchEngineConfig | VllmEngineConfig, Field(discriminator="type")]


class ServerSettings(BaseSettings):
    """What one replica needs: where the model lives, where logs go, and who may administer it."""

    model_config = SettingsConfigDict(env_prefix="RATCHET_", extra="forbid", frozen=True)

    tracking_uri: str = Field(
        min_length=1, description="MLflow tracking/registry URI, e.g. http://127.0.0.1:5000."
    )
    model_name: str = Field(min_length=1, description="Registered model name in MLflow.")
    alias: str = Field(
        default="champion", min_length=1, description="Registry alias loaded at start-up."
    )
    model_aliases: list[str] = Field(
        default_factory=list,
        description="Other ids a request's ``model`` may name besides model_name (JSON list); "
        "any other id is a 404 ``model_not_found``.",
    )
    version: int | None = Field(
        default=None,
        ge=1,
        description="Pin a registry version at start-up instead of resolving the alias "
        "(the rollout's canary group starts this way).",
    )
    kafka_bootstrap: str | None = Field(
        default=None,
        description="Kafka bootstrap servers (host:port). None: behaviour events are only spooled.",
    )
    log_behaviour: bool = Field(
        default=True, description="Log every completion to Kafka. Off only for benchmarks."
    )
    replica_id: str = Field(
        default="replica-0",
        min_length=1,
        max_length=64,
        description="Name of this replica in metrics and logs.",
    )
    host: str = Field(default="127.0.0.1", description="Interface to bind; loopback by default.")
    port: int = Field(default=8000, ge=1, le=65535, description="TCP port to bind.")
    admin_token: SecretStr = Field(
        default=SecretStr(DEFAULT_ADMIN_TOKEN),
        description="Bearer token for /admin/*. Must be changed unless local_mode; off loopback "
        "it must be strong (16+ characters, 64+ estimated bits: token_strength_bits).",
    )
    local_mode: bool = Field(
        default=False, description="Developer mode: allows the default admin token."
    )
    spool_dir: Path = Field(
        default=Path("runs/spool"),
        description="Directory of the on-disk spool that holds events while Kafka is down.",
    )
    spool_max_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=1024,
        description="Spool bound; events beyond it are dropped and counted in /metrics.",
    )
    queue_max_events: int = Field(
        default=10_000,
        ge=1,
        description="In-memory queue between request threads and the logging thread.",
    )
    max_body_bytes: int = Field(
        default=64 * 1024,
        ge=256,
        le=16 * 1024 * 1024,
        description="Largest request body accepted; larger ones get 413 'request_too_large'.",
    )
    max_prompt_chars: int = Field(
        default=4096, ge=1,
        description="Longest prompt accepted (characters); longer is a 400 "
        "'context_length_exceeded'.",
    )
    max_tokens_limit: int = Field(
        default=4096,
        ge=1,
        le=32768,
        description="Largest max_tokens a request may ask for (a larger ask is a 400 with code "
        "'invalid_value'); the model's context bounds the tokens actually generated.",
    )
    default_max_tokens: int = Field(
        default=256,
        ge=1,
        le=32768,
        description="Chat completions without max_tokens generate at most this many tokens "
        "(completions default to 16, as OpenAI's do).",
    )
    require_api_key: bool | None = Field(
        default=None,
        description="Completions and chat need a client key (Authorization: Bearer rk_...). "
        "None: on when host is not loopback, off on loopback.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0.0,
        le=600.0,
        description="A connection must deliver a request's line and headers within this many "
        "seconds of opening (or of its previous response); else it is closed.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0.0,
        le=600.0,
        description="A request body must arrive completely within this many seconds of its "
        "headers; else the answer is 408 and the connection is closed.",
    )
    cache_dir: Path = Field(
        default=Path("runs/model-cache"),
        description="Where downloaded checkpoints are kept (one folder per version).",
    )
    engine: EngineConfig = Field(
        default_factory=TorchEngineConfig,
        description="Which engine samples: 'torch' (embedded, default) or 'vllm' (external); "
        'from the environment as JSON, e.g. RATCHET_ENGINE=\'{"type": "torch", "max_batch": 16}\'.',
    )
    torch_threads: int = Field(
        default=1, ge=1, le=64, description="torch intra-op threads of this replica."
    )
    trust_arm_header: bool = Field(
        default=False,
        description="Record the fleet router's ``x-ratchet-arm`` header (stable, canary, "
        "holdback) in each completion event. On for replicas a fleet starts behind its router; "
        "off for a replica clients reach directly, which could otherwise name any arm.",
    )
    api_keys_path: Path = Field(
        default=Path("runs/api_keys.json"),
        description="Hashed client API keys of inference and the signals API "
        "(deploy/replica/api_keys.py); shared by the replicas of a fleet.",
    )
    response_memory: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description="Served responses remembered for signals; older ones are forgotten first.",
    )
    signal_max_age_s: float = Field(
        default=3600.0,
        gt=0.0,
        description="A signal about a response served longer ago than this is refused (404).",
    )
    signal_max_skew_s: float = Field(
        default=300.0,
        ge=0.0,
        description="A client-supplied signal ``created`` may differ from the receive time by at "
        "most this (a simulator compressing time needs more than its longest delay).",
    )
    test_extra_latency_ms: dict[int, float] = Field(
        default_factory=dict,
        description="Test only: extra milliseconds added to every completion served by these "
        "registry versions (JSON, e.g. {\"3\": 400}): a deliberately slower candidate for canary "
        "tests. Empty in production.",
    )

    @model_validator(mode="after")
    def _refuse_default_token(self) -> ServerSettings:
        if self.admin_token.get_secret_value() == DEFAULT_ADMIN_TOKEN and not self.local_mode:
            raise ValueError(
                "admin_token is the default 'changethis'; set RATCHET_ADMIN_TOKEN "
                "or RATCHET_LOCAL_MODE=true"
            )
        if not self.admin_token.get_secret_value().strip():
            raise ValueError("admin_token must not be empty or blank")
        return self

    @model_validator(mode="after")
    def _refuse_weak_token_off_loopback(self) -> ServerSettings:
        if is_loopback(self.host):
            return self
        reason = weak_token_reason(self.admin_token.get_secret_value())
        if reason is not None:
            raise ValueError(
                f"admin_token is too weak when host={self.host!r} is not loopback (local_mode "
                f"does not allow it): {reason}"
            )
        return self

    @property
    def keys_required(self) -> bool:
        """Whether completions and chat need a client key (``require_api_key``, resolved)."""
        if self.require_api_key is None:
            return not is_loopback(self.host)
        return self.require_api_key
