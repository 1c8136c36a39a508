#!/usr/bin/env bash
# valgrind memcheck of the C++ example (examples/cpp) on a small graph: any memory error or a
# definite leak fails (exit 9). Run after scripts/setup_env.sh; about a minute.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/valgrind"
"$ROOT/.venv/bin/python" "$ROOT/examples/demo.py" --nodes 500 --epochs 3 --no-pyg --out "$OUT" | tail -2
valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=9 \
  "$ROOT/build/example/gnnfuse_infer" "$OUT/gat_scripted.pt" "$OUT/gat_inputs.pt" 2>&1 |
  grep -E "C\+\+|ERROR SUMMARY|definitely lost|indirectly lost|possibly lost"
exit "${PIPESTATUS[0]}"
