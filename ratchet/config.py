"""The one top-level config: composes each stage's typed config.

A cycle logs the fully resolved config (this model, dumped) into its MLflow run. Importing this
module imports no torch, Ray, DeepSpeed, Beam or MLflow: stage configs are plain pydantic.
``load_config(None)`` gives the toy defaults that `make demo` runs; a JSON file overrides them
and unknown keys fail loudly.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from deploy.fleet.rollout import RolloutConfig
from gating.config import GateConfig
from ingest.config import IngestConfig
from policy.config import PolicyConfig, ToyPolicyConfig
from trainer.config import TrainerConfig

_TOY_MODEL = Path(__file__).resolve().parent.parent / "trainer" / "configs" / "toy.json"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChampionBootstrapConfig(_Config):
    """How the first champion is made when the registry has none: supervised warm start."""

    model_config_path: Path = Field(_TOY_MODEL, description="MoEConfig JSON of the toy model.")
    sft_steps: int = Field(
        1000, ge=0, le=1_000_000,
        description="Supervised warm-start steps (batch 32); 0 = none (a pretrained HF policy). "
        "The default toy model at seed 0 and 1,000 steps is the committed champion "
        "(trainer/champion/, built by trainer.fixtures): strong enough for RL to improve, "
        "unlike a 300-step start.",
    )
    seed: int = Field(0, ge=0, description="Seed of the warm start.")
    lazy_fix: bool = Field(
        False,
        description="Plant the lazy-fix habit of trainer/habit.py on the toy warm start: 150 "
        "more SFT steps in which half the off-by-one demonstrations leave the bug in place, so "
        "the champion mostly copies the bug yet still samples the fix, and RL on product "
        "feedback has something to correct (the committed trainer/champion_lazy/). Toy model "
        "config, seed 0 and 1,000 warm-start steps only. `make demo` turns it on.",
    )

    @model_validator(mode="after")
    def _lazy_fix_on_the_committed_champion(self) -> ChampionBootstrapConfig:
        if self.lazy_fix and (self.model_config_path.resolve() != _TOY_MODEL.resolve()
                              or (self.seed, self.sft_steps) != (0, 1000)):
            raise ValueError("champion.lazy_fix is built on the committed toy champion only "
                             "(the toy model config, seed 0, sft_steps 1000)")
        return self


class HoldbackConfig(_Config):
    """The holdback: a fixed share of users kept on the anchor version for the model's life, so
    what the promotions did for users is measured live (champion vs holdback, every cycle).

    The anchor is the registry alias ``anchor``: the model's first champion, set once, moved only
    by ``ratchet anchor --version N --reason ...`` (recorded on the registered model)."""

    share: float = Field(
        0.05, ge=0.0, le=0.5,
        description="Share of users (hash of the OpenAI user field, else the API key) the router "
        "sends to the holdback replicas. Fixed for the model's life: changing it moves users "
        "between arms. A production router takes it as RATCHET_ROUTER_HOLDBACK_SHARE; the demo "
        "starts its router with it. 0 = no holdback. Latency compares across arms only when "
        "each replica carries the same load: share = holdback replicas / all replicas (the toy "
        "preset: 1 of 3).",
    )
    replicas: int = Field(
        1, ge=0, le=16,
        description="Holdback replica processes the demo starts (pinned to the anchor); 0 = none.",
    )
    train_on_holdback: bool = Field(
        False,
        description="Train on the rows the holdback served (rows whose recorded arm is "
        "'holdback'; rows without an arm: the anchor version's while the anchor is not the "
        "champion). Off: they are measured, never trained on, so the holdback stays an "
        "untouched comparison.",
    )
    alpha: float = Field(
        0.05, gt=0.0, lt=0.5,
        description="Family-wise level of the impact table's always-valid intervals "
        "(Bonferroni over its metrics).",
    )
    relative_scale: float = Field(
        0.1, gt=0.0, le=10.0,
        description="Mixing scale of the impact table's confidence sequences, as a relative "
        "change: the size of effect they are tightest around (deploy/fleet/impact.py).",
    )
    drift_rollback: bool = Field(
        True,
        description="When the impact table shows the champion surely worse than the anchor on "
        "edit persistence or a guardrail (dissatisfied follow-ups, client-reported pass), the "
        "cycle records it as a failed audit of the champion and runs the lifetime audit's "
        "rollback (gating/audit.py): champion back to the last version that passed an audit, "
        "else the anchor; that cycle does not train on the drifted champion's spans.",
    )


class FleetConfig(_Config):
    """The serving fleet: the one the demo starts, or the running one a cycle rolls out on."""

    replicas: int = Field(2, ge=1, le=64, description="Replica processes (demo only).")
    admin_token: str = Field(
        "local-demo-token", min_length=8,
        description="Bearer token for admin calls of the router and the replicas (weights, "
        "groups, reload).",
    )
    router_url: str | None = Field(
        None,
        description="Router of the fleet a cycle rolls out on (e.g. http://127.0.0.1:8080); its "
        "canary group gets the candidate. None: a cycle moves the alias only, rolls nothing out.",
    )
    rollout_timeout_s: float = Field(
        3600.0, gt=0.0, le=7 * 86400.0,
        description="A rollout undecided after this long is rolled back.",
    )
    holdback: HoldbackConfig = Field(default_factory=HoldbackConfig)


class SimulatorConfig(_Config):
    """The user simulator that makes the demo's traffic."""

    requests_per_round: int = Field(
        384, ge=1, le=1_000_000, description="Completions requested before each cycle."
    )
    concurrency: int = Field(8, ge=1, le=256, description="Requests in flight at once.")
    speed: float = Field(
        600.0, gt=0.0, le=1e6, description="Time compression: 600 makes 10 minutes last 1 s."
    )
    seed: int = Field(0, ge=0, description="Seed of task draws and user behaviour.")
    tasks_path: Path | None = Field(
        None, description="A suite file in the shared JSONL format (e.g. a pyfuncs train-traffic "
        "pool): users send its tasks as chat turns and grade replies with its hidden asserts. "
        "None = toy tasks as raw prompts. A relative path is resolved from the repository root.",
    )
    max_tokens: int = Field(32, ge=1, le=4096, description="max_tokens of every request.")
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="Temperature of every request.")
    request_timeout_s: float = Field(
        60.0, gt=0.0, le=3600.0, description="A simulated user's HTTP timeout per request; a "
        "reply slower than this is an error and gets no signal (a replica decoding a real "
        "model on a loaded CPU can need minutes at full concurrency).")
    long_tokens: int = Field(
        24, ge=1, le=4096,
        description="A correct answer whose served reply has more completion tokens than this "
        "may draw a 'too long' follow-up.",
    )
    slow_latency_ms: float = Field(
        2000.0, gt=0.0, le=3_600_000.0,
        description="A correct answer whose perceived latency (its completion tokens at "
        "decode_tokens_per_s) exceeds this may draw a 'too slow' follow-up. The wall clock "
        "(queueing on a loaded machine) is never judged.",
    )
    decode_tokens_per_s: float = Field(
        20.0, gt=0.0, le=100_000.0,
        description="Stated decode speed (tokens/s) the simulated users judge waiting at: what "
        "the model controls is how many tokens it writes, not how loaded the machine is.",
    )
    stop_after_code_block: bool = Field(
        True,
        description="Chat requests ask the reply to end once its first code block is closed "
        "(the replica's stop_after_code_block, the gate's rule), as an IDE that inserts the "
        "code of a chat reply would. Toy traffic (raw completions) never sends it.",
    )

    def load_tasks(self) -> list[dict] | None:
        """The traffic's suite tasks (None for toy traffic)."""
        if self.tasks_path is None:
            return None
        from tasks.pyfuncs import read_jsonl

        path = self.tasks_path
        if not path.is_absolute():
            path = Path(__file__).resolve().parents[1] / path
        return read_jsonl(path)

    def signal_policy(self):
        """The simulated users' signal policy (simulation/signal_policy.py) with this config's
        length and speed thresholds."""
        from simulation.signal_policy import SignalPolicy

        return SignalPolicy(long_tokens=self.long_tokens, slow_latency_ms=self.slow_latency_ms,
                            decode_tokens_per_s=self.decode_tokens_per_s)


class CarryConfig(_Config):
    """Rows a rejected candidate was trained on, trained on again by the next cycle.

    A cycle always consumes the spans no gated candidate was trained on. With carry on it also
    re-reads the spans of the cycles since the last promotion (same champion, candidate rejected
    or rolled back), newest first, so a champion's successor is trained on everything its
    traffic produced, not on one round of it. A promotion ends the window."""

    enabled: bool = Field(True, description="Re-train on rejected cycles' spans.")
    max_rows: int = Field(
        1536, ge=0, le=100_000_000,
        description="Most carried rows (newest spans first); older ones are left out.",
    )
    scale_steps: bool = Field(
        False,
        description="Optimizer steps grow with the rows: trainer.steps x (all rows / new rows), "
        "rounded, so every row gets as many passes as a cycle without carry gives it. Off (the "
        "default): a fixed step budget per cycle, carried rows are sampled into the same "
        "number of batches, so a run of rejections does not make each update larger.",
    )


class LockConfig(_Config):
    """The per-model lease (runtime/lease.py): one cycle per model at a time, across machines."""

    ttl_s: float = Field(
        60.0, ge=3.0, le=86400.0,
        description="Lease lifetime; renewed every ttl/3 while a cycle runs, expires if it dies.",
    )
    wait_s: float = Field(
        90.0, ge=0.0, le=86400.0,
        description="How long a second cycle waits for the lease before it exits with a message.",
    )
    settle_s: float = Field(
        1.0, ge=0.0, le=60.0,
        description="Delay between writing the lease tag and re-reading it (read-verify).",
    )


class RatchetConfig(_Config):
    """Everything a cycle needs; each stage reads only its own part."""

    model_name: str = Field("ratchet-toy", min_length=1, description="Registered model name.")
    experiment: str = Field("ratchet", min_length=1, description="MLflow experiment of cycles.")
    min_rows_to_train: int = Field(
        32, ge=1, description="A span with fewer reward rows is not trained on."
    )
    carry: CarryConfig = Field(default_factory=CarryConfig)
    policy: PolicyConfig = Field(
        default_factory=ToyPolicyConfig,
        description="The model the loop improves: the toy MoE (type 'toy') or a Hugging Face "
        "causal LM (type 'hf': a local directory, a GGUF file or a tiny random build). It is "
        "what the first champion is made from; later versions keep its format.",
    )
    champion: ChampionBootstrapConfig = Field(default_factory=ChampionBootstrapConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    rollout: RolloutConfig = Field(
        default_factory=RolloutConfig,
        description="Canary steps, windows (wall seconds), judge thresholds of the deploy stage.",
    )
    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig)
    lock: LockConfig = Field(default_factory=LockConfig)
    stage_max_deaths: int = Field(
        3, ge=1, le=100,
        description="Attempts of the gate stage that may end without a verdict (the process "
        "killed, e.g. by the answer being graded, or an error) before the cycle records a "
        "failing verdict (gate 'completes', with the reasons) and releases the candidate, so "
        "no candidate can wedge the loop; likewise the attempts of the train stage that may "
        "fail before the cycle is skipped with the reasons (its spans consumed).",
    )
    torch_threads: int = Field(
        1, ge=1, le=256,
        description="torch intra-op threads of the process that runs cycles (ingest, train, "
        "gate). 1 by default: the toy and tiny models gain nothing from more, and on a busy "
        "2-core machine two threads trained the toy 5x slower than one (0.17 vs 0.89 step/s). "
        "Raise it to the core count for a large Hugging Face policy.",
    )

    @model_validator(mode="after")
    def _backend_fits_policy(self) -> RatchetConfig:
        if self.policy.type != "toy" and self.trainer.backend.type == "deepspeed":
            raise ValueError("trainer.backend: 'deepspeed' trains the toy policy only (its MoE "
                             f"layers are the toy's); policy.type is '{self.policy.type}': use "
                             "backend 'torch'")
        if self.champion.lazy_fix and (self.policy.type != "toy" or self.policy.path is not None):
            raise ValueError("champion.lazy_fix plants a habit in the toy warm start: it needs "
                             "policy.type 'toy' without a path")
        return self


class ConfigError(ValueError):
    """A config file that cannot be used; the message is one line naming the file and the key."""


def load_config(path: Path | None, *, check_paths: bool = True) -> RatchetConfig:
    """The toy defaults, overridden by the JSON file at ``path`` if given.

    ``check_paths=False`` reads the settings without requiring the policy's weights to be present
    (a preset's trainer or gate settings, read on a machine that has not installed its model).

    Raises :class:`ConfigError` with one line naming the file, the key and, for a misspelt key,
    the closest known one ("did you mean ...").
    """
    if path is None:
        return RatchetConfig()
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    try:
        config = RatchetConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{path}: {_describe(e.errors()[0], data)}") from None
    if check_paths:
        _check_policy_paths(config, path)
    return config


def _check_policy_paths(config: RatchetConfig, path: Path) -> None:
    """A policy directory or GGUF file named in the config must exist (checked before any
    service starts; whether it loads is checked when the champion is built)."""
    policy = config.policy
    if getattr(policy, "package", None) is not None:
        from policy.config import PolicyLoadError, packaged_file

        try:
            packaged_file(policy.package, policy.gguf_file)
        except PolicyLoadError as e:
            raise ConfigError(f"{path}: {e}") from None
    if policy.path is None:
        return
    if not policy.path.is_dir():
        raise ConfigError(f"{path}: policy.path: {policy.path} is not a directory")
    gguf = getattr(policy, "gguf_file", None)
    if gguf is not None and not (policy.path / gguf).is_file():
        raise ConfigError(f"{path}: policy.gguf_file: no file {gguf} in {policy.path}")


def _describe(error: dict, data: object) -> str:
    """One line for the first validation error, with a suggestion for an unknown key."""
    loc = [str(part) for part in error["loc"]]
    where = ".".join(loc) or "(top level)"
    if error["type"] != "extra_forbidden":
        return f"{where}: {error['msg']} (got {error.get('input')!r})"
    known = _known_keys(RatchetConfig, error["loc"][:-1])
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
    hint = f"; did you mean '{'.'.join(loc[:-1] + close)}'?" if close else ""
    return f"unknown key '{where}'{hint}"


def _known_keys(model: type[BaseModel], parents: tuple) -> list[str]:
    """Field names of the (nested) model at ``parents``; union members contribute all theirs."""
    models = [model]
    for part in parents:
        nxt = []
        for m in models:
            field = m.model_fields.get(str(part))
            if field is None:
                continue
            for arg in [field.annotation, *get_args(field.annotation)]:
                for inner in [arg, *get_args(arg)]:
                    if isinstance(inner, type) and issubclass(inner, BaseModel):
                        nxt.append(inner)
        models = nxt or models
    return sorted({name for m in models for name in m.model_fields})
