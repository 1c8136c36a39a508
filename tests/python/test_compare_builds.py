"""scripts/compare_builds.py: inputs for every spec op, and compare's verdicts."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
import torch

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("compare_builds", os.path.join(_ROOT, "scripts", "compare_builds.py"))
cb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cb)

SPECS = cb.load_specs([os.path.join(_ROOT, "ops")])


@pytest.mark.parametrize("name", sorted(SPECS))
def test_inputs_for_every_spec_op(name):
    """Every schema argument gets a value and the op runs forward and backward on them."""
    import argparse

    ctx = cb.Context(argparse.Namespace(tensors=None, quick=True, test_ops_library=None))
    spec = SPECS[name]
    key = f"{name}|uniform|F=3|float64|int32|full"
    args, floating = cb.build_inputs(ctx, spec, "uniform", 3, torch.float64, torch.int32, "full", key)
    schema = list(cb._schema_args(name))
    assert set(schema) <= set(args)
    cb.forward_backward(ctx, key, getattr(torch.ops.gnnfuse, name), schema, args, floating, spec.grad_order)
    errors = {k: e for k, e in ctx.rec.entries.items() if "error" in e}
    assert not errors
    assert any(k.startswith(f"{key}|grad:") for k in ctx.rec.entries)
    # the modes drop the optional CSC caches and edge weights
    nocsc, _ = cb.build_inputs(ctx, spec, "uniform", 3, torch.float64, torch.int32, "nocsc", key + "n")
    csc = [d.colptr for d in spec.sparse() if d.colptr and cb._optional(cb._schema_args(name)[d.colptr])]
    assert all(nocsc[c] is None for c in csc)
    noweight, fl = cb.build_inputs(ctx, spec, "uniform", 3, torch.float64, torch.int32, "noweight", key + "w")
    if "edge_weight" in noweight and cb._optional(cb._schema_args(name)["edge_weight"]):
        assert noweight["edge_weight"] is None and "edge_weight" not in fl


def _write(path, entries, threads=2):
    with open(path, "w") as fh:
        json.dump({"meta": {"format": cb.FORMAT, "threads": threads}, "entries": entries}, fh)


def test_compare_verdicts(tmp_path, capsys):
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    rec = cb.Recorder(None)
    rec.put("spmm|g|out", torch.tensor([1.0, 2.0], dtype=torch.float64))
    rec.put("spmm|g|err", RuntimeError("gnnfuse::spmm: bad\nmore"))
    _write(a, rec.entries)
    _write(b, dict(rec.entries))
    assert cb.main(["compare", a, b]) == 0
    assert "bitwise identical" in capsys.readouterr().out

    other = cb.Recorder(None)
    other.put("spmm|g|out", torch.tensor([1.0, 2.0 + 2**-40], dtype=torch.float64))  # a few ulps
    other.put("spmm|g|err", RuntimeError("gnnfuse::spmm: bad\nmore"))
    other.put("spmm|g|extra", torch.zeros(1))
    _write(b, other.entries)
    assert cb.main(["compare", a, b]) == 1
    out = capsys.readouterr().out
    assert "DIFF spmm|g|out" in out and f"ONLY IN {b}: spmm|g|extra" in out

    # the statistics beside the hash are not compared (torch's sum depends on the thread count)
    _write(b, {k: dict(e, sum=0.5) if "sum" in e else e for k, e in rec.entries.items()})
    assert cb.main(["compare", a, b]) == 0
    capsys.readouterr()

    _write(b, rec.entries, threads=1)
    assert cb.main(["compare", a, b]) == 1
    assert "meta threads" in capsys.readouterr().out
