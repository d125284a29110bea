"""An HF checkpoint goes through the MLflow registry like a toy one: logged as a model from code
(no pickle), resolved by alias, downloaded, loaded by format; pyfunc generates with it."""

import json

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "hf-policy-test"


def _log(uri, directory, alias):
    import mlflow

    from runtime.registry import log_checkpoint

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("hf-policy-register")
    with mlflow.start_run():
        return log_checkpoint(directory, model_name=MODEL, alias=alias)


def test_hf_and_toy_checkpoints_round_trip(mlflow_server, tmp_path):
    import mlflow
    import torch

    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.hf import HFPolicy
    from policy.loader import load_policy
    from policy.toy.adapter import ToyPolicy
    from policy.toy.model import MoEConfig, MoETransformer
    from runtime.registry import download_checkpoint, resolve_alias

    uri = mlflow_server.uri
    hf = load_policy(HFPolicyConfig(build=TinyHFSpec(family="qwen3_moe", vocab=384)),
                     workdir=tmp_path / "build")
    hf.save(tmp_path / "hf-ck", metadata={"model_version": 1})
    torch.manual_seed(0)
    toy = ToyPolicy(MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=48)))
    toy.save(tmp_path / "toy-ck")

    hf_ref = _log(uri, tmp_path / "hf-ck", "champion")
    toy_ref = _log(uri, tmp_path / "toy-ck", "candidate")
    assert resolve_alias(uri, MODEL, "champion") == hf_ref.version

    got = download_checkpoint(uri, MODEL, hf_ref.version, tmp_path / "dl")
    assert json.loads((got / "config.json").read_text())["model_type"] == "qwen3_moe"
    assert not list(got.parent.parent.rglob("*.pkl"))  # nothing pickled
    loaded = load_policy(got)
    assert isinstance(loaded, HFPolicy) and loaded.moe_spec == hf.moe_spec
    for a, b in zip(loaded.module.state_dict().values(), hf.module.state_dict().values()):
        assert torch.equal(a, b)
    assert isinstance(load_policy(download_checkpoint(uri, MODEL, toy_ref.version,
                                                      tmp_path / "dl")), ToyPolicy)

    pyfunc = mlflow.pyfunc.load_model(f"models:/{MODEL}@champion")
    texts = pyfunc.predict(["def f(x):\n    return "])  # greedy, 32 new tokens
    ids = hf.encode_prompt("def f(x):\n    return ")
    assert texts == [hf.generate([ids], max_new_tokens=32, temperature=0.0)[0].text]


def test_refuses_to_log_a_directory_no_policy_loads(mlflow_server, tmp_path):
    from policy.config import PolicyLoadError

    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hello")
    with pytest.raises(PolicyLoadError, match="no config.json"):
        _log(mlflow_server.uri, tmp_path / "junk", None)


def test_registering_a_version_prints_nothing(mlflow_server, tmp_path, capfd):
    """MLflow's "Created version '3' of model …" lines bypass logging; the terminal never
    sees them (the operator's terminal shows ratchet's lines only)."""
    import torch

    from policy.toy.adapter import ToyPolicy
    from policy.toy.model import MoEConfig, MoETransformer

    torch.manual_seed(0)
    ToyPolicy(MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=48))).save(
        tmp_path / "toy-ck")
    capfd.readouterr()
    ref = _log(mlflow_server.uri, tmp_path / "toy-ck", None)
    err = capfd.readouterr().err
    assert ref.version >= 1
    assert "Created version" not in err and "registered model" not in err, err
