"""docs/gen_op_docs.py: a page per spec from the generator's own dump, derived ops included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GEN = next((p for p in (ROOT / "build" / "gnnfuse-gen", ROOT / "build" / "tests" / "gnnfuse-gen") if p.exists()), None)


@pytest.mark.skipif(GEN is None, reason="gnnfuse-gen not built")
def test_op_pages_are_generated_from_specs(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "docs" / "gen_op_docs.py"), "--gen", str(GEN), "--out", str(tmp_path)], check=True)
    specs = sorted(p.stem for p in (ROOT / "ops").glob("*.spec"))
    assert sorted(p.stem for p in tmp_path.glob("*.md") if p.stem != "README") == specs
    gat = (tmp_path / "gat.md").read_text()
    assert "Y(i,h,f) = A(i,j) * exp(leaky_relu(" in gat
    assert "`gat_grad_x` (derived)" in gat and "after trie fusion" in gat
    assert "[spmm](spmm.md)" in (tmp_path / "README.md").read_text()


def test_readme_op_table_names_every_spec():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Ops"):readme.index("## Building by hand")]
    for spec in (ROOT / "ops").glob("*.spec"):
        assert f"`{spec.stem}`" in table, f"README's op table lacks {spec.stem}"
