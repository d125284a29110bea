"""`make gpu-kit` without the network: the kit's pins are the lock's, it carries the requirements
its wheels have beyond the GPU image, and the Makefile, the kit script and the check agree on the
folder. The download itself is run by hand (docs/GPU.md)."""

import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).parents[2]
GPU_PY = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split()[0].split("==")
            out[_norm(name)] = version
    return out


def _image() -> set[str]:
    lines = (ROOT / "scripts" / "gpu_image" / "packages.txt").read_text().splitlines()
    return {_norm(x) for x in lines if x.strip() and not x.startswith("#")}


def test_kit_pins_are_the_locked_versions():
    kit, lock = _pins(ROOT / "scripts" / "gpu_kit.txt"), _pins(ROOT / "requirements.lock")
    assert kit, "scripts/gpu_kit.txt lists no wheel"
    assert {n: v for n, v in kit.items() if lock.get(n) != v} == {}


def test_kit_holds_what_the_check_imports_beyond_the_image():
    kit, image = set(_pins(ROOT / "scripts" / "gpu_kit.txt")), _image()
    # the check's configs are pydantic models; the DeepSpeed step needs deepspeed
    assert {"pydantic", "pydantic-core", "deepspeed"} <= kit
    assert not kit & {"torch", "transformers", "numpy", "pyarrow", "safetensors"} & image, \
        "the kit must not shadow the image's torch stack"
    missing = {}
    for name in kit:
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(GPU_PY):
                continue
            if _norm(req.name) not in kit | image:
                missing.setdefault(name, []).append(req.name)
    assert missing == {}


def test_kit_sdist_lines_are_built_into_wheels():
    lines = [x.split() for x in (ROOT / "scripts" / "gpu_kit.txt").read_text().splitlines()
             if x.strip() and not x.startswith("#")]
    assert all(len(x) == 1 or x[1] == "sdist" for x in lines)
    assert [x[0] for x in lines if len(x) == 2] == ["deepspeed==0.19.8"]


def test_makefile_script_and_check_agree_on_the_kit_folder():
    make = (ROOT / "Makefile").read_text()
    folder = re.search(r"^GPU_KIT := (\S+)$", make, re.M).group(1)
    recipe = re.search(r"^gpu-kit:.*\n\t(.+)$", make, re.M).group(1)
    assert "scripts/gpu_kit.sh $(GPU_KIT)" in recipe
    check = (ROOT / "scripts" / "gpu_check.sh").read_text()
    assert f"$ROOT/{folder}" in check
    kit_sh = (ROOT / "scripts" / "gpu_kit.sh").read_text()
    assert "--python-version 3.12" in kit_sh and "manylinux_2_17_x86_64" in kit_sh
    assert "--only-binary=:all:" in kit_sh
