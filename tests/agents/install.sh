#!/usr/bin/env bash
# Install the coding agents the tests drive, at pinned versions, into a cache
# directory (default .cache/agents, gitignored). Idempotent: a stamp naming the
# versions makes a second run a no-op; a version change reinstalls.
#
#   bash tests/agents/install.sh            # from the repository root or anywhere
#   HUMPYARD_AGENTS_DIR=/some/dir bash tests/agents/install.sh
#
# Only the npm registry is used (npm's ordinary client). The Claude Code package
# ships its native binary in a per-platform optional dependency, so its
# postinstall script is not needed and npm's default of not running it is kept.
set -euo pipefail

CLAUDE_CODE_VERSION=2.1.197
CODEX_VERSION=0.171.0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${HUMPYARD_AGENTS_DIR:-$root/.cache/agents}"
stamp="$dir/.installed-claude-code-$CLAUDE_CODE_VERSION-codex-$CODEX_VERSION"

if [ -f "$stamp" ] && [ -x "$dir/node_modules/.bin/claude" ] && [ -x "$dir/node_modules/.bin/codex" ]; then
  exit 0
fi
command -v npm >/dev/null || { echo "tests/agents/install.sh: npm is required (apt-get install npm)" >&2; exit 1; }

mkdir -p "$dir"
rm -f "$dir"/.installed-*
# A package.json of its own keeps npm from walking up into the repository.
printf '{"name":"humpyard-test-agents","private":true}\n' > "$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --no-update-notifier --loglevel=error \
  "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION"
"$dir/node_modules/.bin/claude" --version >/dev/null
"$dir/node_modules/.bin/codex" --version >/dev/null
touch "$stamp"
