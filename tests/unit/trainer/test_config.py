import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from trainer.config import DeepSpeedBackend, SequenceGSPO, TrainerConfig


def test_tagged_unions_parse():
    c = TrainerConfig.model_validate({"objective": {"type": "sequence_gspo", "band_high": 3.0},
                                      "backend": {"type": "deepspeed", "zero_stage": 2}})
    assert isinstance(c.objective, SequenceGSPO) and c.objective.band_high == 3.0
    assert isinstance(c.backend, DeepSpeedBackend) and c.backend.zero_stage == 2
    assert TrainerConfig.model_validate_json(c.model_dump_json()) == c


@pytest.mark.parametrize("bad", [{"lr": 0}, {"objective": {"type": "ppo"}}, {"stepz": 3},
                                 {"backend": {"type": "deepspeed", "zero_stage": 3}},
                                 {"is_cap": 0.9}, {"dual_clip_c": 1.1}])
def test_rejects_bad(bad):
    with pytest.raises(ValidationError):
        TrainerConfig.model_validate(bad)


def test_config_import_is_light():
    code = ("import json, sys, trainer.config; heavy = ('torch', 'deepspeed', 'ray', 'mlflow'); "
            "print(json.dumps(sorted(m for m in heavy if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
