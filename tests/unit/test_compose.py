"""docker-compose.yml stays valid compose (no Docker engine needed to check it)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_compose_file_is_valid():
    env = {**os.environ, "RATCHET_ADMIN_TOKEN": "not-a-default-token"}
    proc = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        check=False, capture_output=True, text=True, env=env, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_compose_refuses_to_run_the_fleet_without_an_admin_token():
    env = {k: v for k, v in os.environ.items() if k != "RATCHET_ADMIN_TOKEN"}
    proc = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        check=False, capture_output=True, text=True, env=env, timeout=60,
    )
    assert proc.returncode != 0
    assert "RATCHET_ADMIN_TOKEN" in proc.stderr
