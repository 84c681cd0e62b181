#!/usr/bin/env bash
# Run the whole test suite; sets up first whatever is missing (apt packages, venv, npm packages, models).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
