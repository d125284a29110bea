"""Load checks of a replica: a checkpoint with NaN weights or tensors of the wrong shape is refused
with a message naming the problem; a good one loads."""

import json

import pytest
from safetensors.torch import load_file, save_file

from deploy.replica.model_host import ModelLoadError, load_checked
from deploy.replica.toy_models import build_untrained
from policy.toy.checkpoint import save_checkpoint


@pytest.fixture
def checkpoint(tmp_path):
    return save_checkpoint(build_untrained(0), tmp_path / "ckpt", metadata={})


def _weights(directory):
    return directory / "model.safetensors"


def test_good_checkpoint_loads(checkpoint):
    assert load_checked(checkpoint).module.config is not None


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused(checkpoint, value):
    tensors = load_file(str(_weights(checkpoint)))
    name = sorted(tensors)[3]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = value
    save_file(tensors, str(_weights(checkpoint)))
    with pytest.raises(ModelLoadError, match=f"non-finite weights in {name}"):
        load_checked(checkpoint)


def test_wrong_shape_is_refused(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    config["d_model"] = config["d_model"] * 2
    (checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="do not match config.json.*size mismatch"):
        load_checked(checkpoint)


def test_truncated_weights_file_is_refused(checkpoint):
    data = _weights(checkpoint).read_bytes()
    _weights(checkpoint).write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError):
        load_checked(checkpoint)
