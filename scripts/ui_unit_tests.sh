#!/usr/bin/env bash
# The UI's logic tests (Vitest), as scripts/test.sh runs them. Colour only on a terminal: Vitest colours its
# output whenever CI is set (tinyrainbow), which in CI's log file is escape codes around every line.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -t 1 ] || export NO_COLOR=1
exec npm test -w frontend --silent
