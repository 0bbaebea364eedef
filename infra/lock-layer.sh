#!/usr/bin/env bash
# Write infra/layer-requirements.lock: the Lambda layer's dependencies at exact versions,
# each with the sha256 of the wheel pip picks for the layer's platforms. `make package`
# (infra/package.sh) installs from this file with --require-hashes, so every build ships
# the same bytes; re-run this script (and commit the result) to take newer versions.
#
# pip resolves humpyard's base and [aws] dependencies for CPython 3.12 on each platform
# below, wheels only, exactly as package.sh installs them (`pip install --dry-run
# --report`); the lock lists every version once, with the hash of each platform's wheel
# (a pure-Python wheel has one hash for all). humpyard itself is not in the lock:
# package.sh builds it from this tree.
#
# Environment:
#   PYTHON     runs pip (default python3; needs the package index)
#   PLATFORMS  wheel platforms (default: manylinux2014_aarch64 manylinux2014_x86_64)
#   LOCK       the file to write (default infra/layer-requirements.lock)
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PLATFORMS=${PLATFORMS:-manylinux2014_aarch64 manylinux2014_x86_64}
LOCK=${LOCK:-infra/layer-requirements.lock}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

reports=()
for platform in $PLATFORMS; do
  echo "lock: resolving .[aws] for cp312 $platform" >&2
  "$PYTHON" -m pip install --quiet --dry-run --ignore-installed --disable-pip-version-check \
    --report "$work/$platform.json" --target "$work/target" \
    --platform "$platform" --implementation cp --python-version 3.12 --only-binary=:all: \
    '.[aws]' 2>"$work/$platform.log" || { cat "$work/$platform.log" >&2; exit 1; }
  reports+=("$work/$platform.json")
done

"$PYTHON" - "$LOCK" "${reports[@]}" <<'PY'
import json
import sys

lock, *reports = sys.argv[1:]
pins: dict[str, tuple[str, str, set[str]]] = {}  # normalized name -> (name, version, hashes)
for report in reports:
    with open(report) as f:
        for item in json.load(f)["install"]:
            meta = item["metadata"]
            name = meta["name"]
            key = name.lower().replace("_", "-").replace(".", "-")
            if key == "humpyard":
                continue
            digest = item["download_info"].get("archive_info", {}).get("hashes", {})
            if "sha256" not in digest:
                sys.exit(f"lock: no sha256 for {name} {meta['version']}")
            _, version, hashes = pins.setdefault(key, (name, meta["version"], set()))
            if version != meta["version"]:
                sys.exit(f"lock: {name} resolves to {version} and {meta['version']} on "
                         "different platforms; pin it in pyproject.toml")
            hashes.add(digest["sha256"])
with open(lock, "w") as out:
    out.write("# The Lambda layer's dependencies, exact and hashed: written by "
              "infra/lock-layer.sh,\n# installed by infra/package.sh with --require-hashes. "
              "Do not edit by hand.\n")
    for key in sorted(pins):
        name, version, hashes = pins[key]
        out.write(f"{key}=={version}")
        for h in sorted(hashes):
            out.write(f" \\\n    --hash=sha256:{h}")
        out.write("\n")
print(f"lock: wrote {len(pins)} pins to {lock}", file=sys.stderr)
PY
