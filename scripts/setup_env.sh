#!/usr/bin/env bash
# Idempotent setup on a fresh clone: the system packages the C++ build needs (when root),
# a virtual environment in .venv with the pinned torch, and an editable build of gnnfuse
# (CMake, through setup.py). Safe to rerun: each step does only what is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# System packages: compiler, CMake, Ninja, GoogleTest (for the C++ tests), ccache (optional).
missing=()
for pkg in g++ cmake ninja-build libgtest-dev ccache; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
  if [[ "$(id -u)" -eq 0 ]]; then
    echo "setup_env: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup_env: missing system packages (install them as root): ${missing[*]}" >&2
  fi
fi

if [[ ! -x .venv/bin/python ]]; then
  echo "setup_env: creating .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
PY="$ROOT/.venv/bin/python"

# torch stays pinned: an unpinned or open-ended torch lets pip pick a multi-GB CUDA build.
# setuptools >= 70.1 builds wheels (and editable installs) without the separate wheel package.
# torch_geometric (local disk) is the reference of the gnnfuse.nn layer tests.
"$PY" -m pip install -q torch==2.13.0 numpy scipy pytest expecttest hypothesis "setuptools>=70.1" "torch_geometric==2.8.1"

# The build needs this interpreter's torch, hence no build isolation.
echo "setup_env: building gnnfuse"
"$PY" -m pip install -q --no-build-isolation -e .
