"""The GPU machine's image, emulated on the CPU for ``scripts/gpu_check.sh --cpu-smoke``.

On the path only in the smoke (``RATCHET_GPU_IMAGE=emulate``): every installed distribution that
is neither in the image (packages.txt beside this file) nor in the kit (scripts/gpu_kit.txt) is
hidden, so ``import mlflow`` fails here as it would there and ``importlib.util.find_spec`` says
None. What it cannot emulate: the image's versions (Python 3.12, torch 2.11, transformers 5.17)
and CUDA itself.
"""

import os
import re
import sys
from pathlib import Path


def _names(path: Path) -> set[str]:
    out = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(_norm(re.split(r"[=<> ]", line, maxsplit=1)[0]))
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _with_requirements(allowed: set[str]) -> set[str]:
    """``allowed`` and what the versions installed here require (no extras): the image holds
    its own versions' requirements, which may have other names (huggingface-hub 2 needs
    httpx2)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    todo, seen = list(allowed), set(allowed)
    while todo:
        try:
            reqs = metadata.requires(todo.pop()) or []
        except metadata.PackageNotFoundError:
            continue
        for line in reqs:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            name = _norm(req.name)
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def _hidden_modules(allowed: set[str]) -> set[str]:
    from importlib.metadata import packages_distributions

    hidden = set()
    for module, dists in packages_distributions().items():
        if not any(_norm(d) in allowed for d in dists):
            hidden.add(module)
    return hidden


class _Hiding:
    """Wraps the path finder: hidden top-level modules are not found."""

    def __init__(self, finder, hidden: set[str]):
        self.finder, self.hidden = finder, hidden

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.hidden:
            return None
        return self.finder.find_spec(name, path, target)

    def invalidate_caches(self):
        return self.finder.invalidate_caches()

    def find_distributions(self, *args, **kwargs):  # importlib.metadata: versions stay readable
        return self.finder.find_distributions(*args, **kwargs)


def _install() -> None:
    from importlib.machinery import PathFinder

    here = Path(__file__).resolve().parent
    allowed = _names(here / "packages.txt") | _names(here.parent / "gpu_kit.txt")
    allowed = _with_requirements(allowed) | {"ratchet-rl", "pip", "setuptools", "wheel"}
    hidden = _hidden_modules(allowed)
    sys.meta_path[:] = [_Hiding(f, hidden) if f is PathFinder else f for f in sys.meta_path]


if os.environ.get("RATCHET_GPU_IMAGE") == "emulate":
    _install()
