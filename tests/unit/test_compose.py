"""docker-compose.yml stays valid compose (no Docker engine needed to check it), and the image
it builds can grade: bubblewrap installed, ratchet under an init that reaps the sandbox's
processes, and the grading services allowed to build the box inside their container."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TINI = "/usr/bin/tini"
SANDBOX_OPTS = {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"}
"""What bwrap needs in a Docker container: the default seccomp and AppArmor profiles block its
unprivileged user namespace and mounts, the masked /proc paths its own /proc."""


def _dockerfile() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return [ins.strip() for ins in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines()
            if ins.strip()]


def _entrypoint() -> list[str]:
    (line,) = [ins for ins in _dockerfile() if ins.startswith("ENTRYPOINT")]
    return json.loads(line.removeprefix("ENTRYPOINT"))


def _ratchet_services() -> dict[str, dict]:
    """The services built from this repo's image (YAML anchors and merge keys resolved)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return {name: svc for name, svc in compose["services"].items() if "build" in svc}


def test_the_image_installs_bubblewrap_and_tini_without_recommends():
    installs = [ins for ins in _dockerfile() if ins.startswith("RUN") and "apt-get install" in ins]
    words = {w for ins in installs for w in ins.split()}
    assert {"bubblewrap", "tini", "--no-install-recommends"} <= words, installs


def test_every_ratchet_service_runs_under_an_init():
    assert _entrypoint() == [TINI, "--", "ratchet"]
    services = _ratchet_services()
    assert {"controller", "fleet"} <= set(services)
    for name, svc in services.items():
        entrypoint = svc.get("entrypoint", _entrypoint())
        assert svc.get("init") is True or entrypoint[0] == TINI, (name, entrypoint)


def test_the_services_that_grade_may_build_the_sandbox_with_no_added_capability():
    services = _ratchet_services()
    grading = {name: svc for name, svc in services.items()
               if "ratchet" in svc.get("entrypoint", _entrypoint())}  # the CLI: cycles grade
    assert "controller" in grading and "fleet" not in grading
    for name, svc in grading.items():
        assert SANDBOX_OPTS <= set(svc.get("security_opt", [])), name
        assert not svc.get("privileged") and not svc.get("cap_add"), name


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
