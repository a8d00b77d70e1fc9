#!/usr/bin/env bash
# Build the web UI into frontend/dist (what the backend serves at /; RLSTUDIO_FRONTEND_DIR overrides).
# Idempotent: npm dependencies are installed only when the lockfile changed, the bundle is rebuilt only when
# the UI's sources changed (hash stamps). Also installs Debian's Chromium for the UI tests when it is missing
# and we are root (Playwright cannot download browsers here).
#   scripts/setup_frontend.sh            # deps + build (+ chromium when root)
#   SKIP_CHROMIUM=1 scripts/setup_frontend.sh
#   FORCE=1 scripts/setup_frontend.sh    # rebuild regardless of stamps
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { echo "[setup_frontend] $*"; }

hash_of() {  # sha256 over the given files/dirs (paths and contents), stable order
  find "$@" -type f -not -path '*/node_modules/*' -not -path '*/dist/*' -print0 2>/dev/null \
    | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

# --- Chromium for the Playwright UI tests -------------------------------------------------------------
if [[ -z "${SKIP_CHROMIUM:-}" && ! -x /usr/bin/chromium ]]; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing Debian's chromium (for tests/ui)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || log "WARNING: could not install chromium; UI tests will be skipped"
  else
    log "no /usr/bin/chromium (not root: install it with 'apt-get install chromium'); UI tests will be skipped"
  fi
fi

# --- Node ----------------------------------------------------------------------------------------------
if ! command -v npm >/dev/null; then
  log "WARNING: npm not found (Node >= 20 needed); the server will show a 'UI not built' page."
  [[ -n "${RLSTUDIO_REQUIRE_UI:-}" ]] && exit 1
  exit 0
fi

DEPS_STAMP=node_modules/.rlstudio-deps-stamp
deps_hash=$(hash_of package.json package-lock.json frontend/package.json)
if [[ -n "${FORCE:-}" || ! -f $DEPS_STAMP || $(cat "$DEPS_STAMP") != "$deps_hash" ]]; then
  if [[ -f package-lock.json ]]; then
    log "npm ci"
    npm ci --no-audit --no-fund --loglevel=error
  else
    log "npm install (no package-lock.json)"
    npm install --no-audit --no-fund --loglevel=error
  fi
  echo "$deps_hash" > "$DEPS_STAMP"
else
  log "npm dependencies up to date"
fi

BUILD_STAMP=frontend/dist/.build-stamp
build_hash=$(hash_of package-lock.json frontend/package.json frontend/index.html frontend/vite.config.ts \
  frontend/tsconfig.json frontend/src)
if [[ -n "${FORCE:-}" || ! -f $BUILD_STAMP || $(cat "$BUILD_STAMP") != "$build_hash" || ! -f frontend/dist/index.html ]]; then
  log "building the UI into frontend/dist"
  npm run build -w frontend --silent
  echo "$build_hash" > "$BUILD_STAMP"
else
  log "UI build up to date (frontend/dist)"
fi
log "done: $ROOT/frontend/dist"
