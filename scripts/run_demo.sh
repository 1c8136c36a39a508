#!/usr/bin/env bash
# Sets up (scripts/setup_env.sh), then runs the demo; arguments go to examples/demo.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup_env.sh
exec "$ROOT/.venv/bin/python" examples/demo.py "$@"
