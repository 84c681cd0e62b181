#!/usr/bin/env bash
# Set up everything Voxline needs on a fresh Debian machine (root), idempotently:
# apt packages, npm packages (node_modules), the widget bundles (dist), the Python venv (.venv), every model and the
# browser runtimes (into the cache, with brotli/gzip variants of what the page downloads).
# A second run only checks: each step is skipped when what it made is still current.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(chromium chromium-driver espeak-ng sox libportaudio2 libsndfile1)
PYTHON=${PYTHON:-python3}
step() { printf '\n== %s\n' "$*" >&2; }
started=$(date +%s)

step "apt packages: ${APT_PACKAGES[*]}"
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "installed: ${missing[*]}" >&2
else
  echo "all present" >&2
fi

step "npm packages (node_modules)"
lock_key=$(sha256sum package-lock.json | cut -c1-16)
if [ "$(cat node_modules/.voxline-lock 2>/dev/null)" != "$lock_key" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_key" > node_modules/.voxline-lock
else
  echo "up to date" >&2
fi

step "widget bundles (npm run build → dist/)"
# Keyed on everything the bundles are made from, so an edit to the browser modules rebuilds them.
widget_key=$(cat package.json package-lock.json scripts/build-widget.mjs web/voxline/*.js web/widget/*.js \
  | sha256sum | cut -c1-16)
if [ ! -f dist/widget.js ] || [ "$(cat dist/.voxline-build 2>/dev/null)" != "$widget_key" ]; then
  npm run --silent build
  echo "$widget_key" > dist/.voxline-build
else
  echo "up to date" >&2
fi

step "python venv (.venv)"
# After the widget build: the package carries the bundles of dist/ (pyproject.toml's force-include), and hatchling
# refuses to install it, even editable, without them.
deps_key=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if [ "$(cat .venv/.voxline-deps 2>/dev/null)" != "$deps_key" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt \
    -e '.[client,convert,test,tracing,bench,ray]'
  echo "$deps_key" > .venv/.voxline-deps
else
  echo "up to date" >&2
fi

step "models and browser runtimes (voxline models fetch: builds them, unpacks the runtimes, precompresses both once)"
.venv/bin/voxline models fetch

echo "setup done in $(( $(date +%s) - started )) s" >&2
