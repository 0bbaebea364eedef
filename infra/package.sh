#!/usr/bin/env bash
# Build what `sam deploy` uploads, without the sam CLI or Docker:
#
#   build/layer/python/   humpyard and every dependency, as wheels for CPython 3.12 on
#                         Linux arm64 (manylinux2014_aarch64), byte-compiled by Python 3.12
#                         with --invalidation-mode unchecked-hash
#
# The functions' own code (CodeUri: functions/) is the source tree itself: four thin
# entry points and humpyard.toml, small enough that compiling them at a cold start costs
# nothing measurable. (They are not compiled here: an unchecked-hash .pyc next to a
# source file would hide later edits of that file.)
#
# Why unchecked-hash: sam deploy zips the layer with 1980-01-01 timestamps, so a
# timestamp-checked .pyc never matches its source and every cold start recompiles
# everything (and cannot cache it: /opt is read-only). Hash-based, unchecked .pyc files
# are used as they are.
#
# Environment:
#   PYTHON     runs pip (default python3; needs PyPI for the wheels)
#   PYTHON312  compiles the bytecode, which must be 3.12's (default: python3.12 on PATH,
#              else a pyenv-installed 3.12)
#   PLATFORM   wheel platform (default manylinux2014_aarch64; manylinux2014_x86_64 for an
#              x86 stack or a local smoke test)
#   BUILD_DIR  where to build (default build)
#   EXTRAS     more humpyard extras, e.g. switchyard (default none): the lock does not
#              cover them, so with EXTRAS the layer is resolved from pyproject.toml's
#              version ranges instead (a warning says so)
#   LOCK       the layer's pinned, hashed dependencies (default infra/layer-requirements.lock,
#              written by infra/lock-layer.sh): humpyard's base and [aws] dependencies
#              are installed from it with --require-hashes, humpyard itself with --no-deps
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PYTHON312=${PYTHON312:-}
PLATFORM=${PLATFORM:-manylinux2014_aarch64}
BUILD_DIR=${BUILD_DIR:-build}
EXTRAS=${EXTRAS:-}
LOCK=${LOCK:-infra/layer-requirements.lock}
LAYER="$BUILD_DIR/layer/python"

is_312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
if [ -z "$PYTHON312" ]; then
  # python3.12 on PATH, else a pyenv-installed 3.12 that its shims do not expose.
  for candidate in python3.12 "$(command -v pyenv >/dev/null && pyenv root)"/versions/3.12*/bin/python3.12; do
    if is_312 "$candidate"; then PYTHON312=$candidate; break; fi
  done
fi
if [ -z "$PYTHON312" ] || ! is_312 "$PYTHON312"; then
  echo "package: no Python 3.12 found; the Lambda runtime is python3.12 and the layer's" >&2
  echo "package: bytecode must be compiled by 3.12 (set PYTHON312=/path/to/python3.12)" >&2
  exit 2
fi

rm -rf "$BUILD_DIR/layer" "$BUILD_DIR/wheels"
mkdir -p "$LAYER" "$BUILD_DIR/wheels"

echo "package: building the humpyard wheel"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$BUILD_DIR/wheels" .

WHEEL=$(ls "$BUILD_DIR"/wheels/humpyard-*.whl)
pip_target() {
  "$PYTHON" -m pip install --quiet --no-compile --disable-pip-version-check \
    --no-warn-conflicts --root-user-action=ignore \
    --target "$LAYER" --platform "$PLATFORM" --implementation cp --python-version 3.12 \
    --only-binary=:all: "$@"
}
if [ -z "$EXTRAS" ]; then
  echo "package: installing the locked dependencies ($LOCK) for cp312 $PLATFORM into $LAYER"
  pip_target --no-deps --require-hashes -r "$LOCK"
  echo "package: installing humpyard (no dependencies: the lock has them)"
  pip_target --no-deps --upgrade "$WHEEL"
else
  echo "package: WARNING: EXTRAS=$EXTRAS is not covered by $LOCK; resolving the layer" >&2
  echo "package: from pyproject.toml's version ranges instead" >&2
  pip_target "$WHEEL[aws,$EXTRAS]"
fi

# Nothing in the layer is run as a script, and pip's console scripts name this machine's
# interpreter.
rm -rf "$LAYER/bin"
find "$LAYER" -name '__pycache__' -type d -prune -exec rm -rf {} +

echo "package: byte-compiling with $PYTHON312 (unchecked-hash)"
"$PYTHON312" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$LAYER"

# functions/ is uploaded as it is: leave no local interpreter's bytecode in it.
find functions -name '__pycache__' -type d -prune -exec rm -rf {} +

if [ -d .aws-sam/build ]; then
  # sam deploy prefers .aws-sam/build/template.yaml when it exists; a stale one would
  # deploy old code. This tree is deployed from template.yaml directly.
  echo "package: removing .aws-sam/build (deploy from template.yaml)"
  rm -rf .aws-sam/build
fi

size=$(du -sm "$BUILD_DIR/layer" | cut -f1)
echo "package: $BUILD_DIR/layer is ${size} MB unzipped (Lambda allows 250 MB for all layers and code)"
if [ "$size" -ge 240 ]; then
  echo "package: the layer is too large for Lambda" >&2
  exit 1
fi
echo "package: done; deploy with: sam deploy [--config-env prod]"
