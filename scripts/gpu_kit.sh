#!/usr/bin/env bash
# make gpu-kit: the wheels of scripts/gpu_kit.txt for CPython 3.12 manylinux x86-64 (the GPU
# machine's python3), in DIR (default .cache/gpu-kit/, ignored by git). A line marked "sdist" is a
# source-only release: downloaded, then built here into a pure-Python wheel without compiled ops,
# with this venv's torch (DS_BUILD_OPS=0). Prints the kit's size and checks that the working tree
# and the kit together stay under the 64 MiB a GPU call may carry.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/.cache/gpu-kit}
PY=${PY:-python3}
BUILD_PY=${BUILD_PY:-$ROOT/.venv/bin/python}
LIMIT_MIB=64
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
rm -rf "$DIR"
mkdir -p "$DIR" "$DIR.sdist"
binary=() sdist=()
while read -r pin mark; do
  case "$pin" in ''|'#'*) continue ;; esac
  if [ "${mark:-}" = sdist ]; then sdist+=("$pin"); else binary+=("$pin"); fi
done < "$ROOT/scripts/gpu_kit.txt"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d "$DIR" "${binary[@]}"
for pin in "${sdist[@]}"; do
  "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$DIR.sdist" "$pin"
done
if [ ${#sdist[@]} -gt 0 ]; then
  DS_BUILD_OPS=0 "$BUILD_PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DIR" \
    "$DIR.sdist"/*.tar.gz
fi
rm -rf "$DIR.sdist"
ls -l "$DIR"
n_want=$(( ${#binary[@]} + ${#sdist[@]} ))
n_have=$(ls "$DIR"/*.whl | wc -l)
[ "$n_have" = "$n_want" ] || { echo "gpu-kit: $n_have wheels for $n_want pins" >&2; exit 1; }
kit=$(du -cb "$DIR"/*.whl | tail -1 | cut -f1)
tree=$(cd "$ROOT" && git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null \
  | tail -1 | cut -f1)
total=$(( kit + tree ))
awk -v n="$n_have" -v k="$kit" -v t="$tree" -v l="$LIMIT_MIB" 'BEGIN { m = 1048576;
  printf "gpu-kit: %d wheels, %.1f MiB; working tree %.1f MiB; together %.1f MiB (limit %d MiB)\n",
  n, k / m, t / m, (k + t) / m, l }'
[ "$total" -lt $(( LIMIT_MIB * 1048576 )) ] || { echo "gpu-kit: over $LIMIT_MIB MiB" >&2; exit 1; }
