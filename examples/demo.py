#!/usr/bin/env python3
"""gnnfuse demo: train a GCN and a GAT built from gnnfuse.nn layers next to the same models built
from torch_geometric's layers, then deploy the GAT through TorchScript.

    python examples/demo.py                                   # generated citation-like graph
    python examples/demo.py --dataset cora --root ../shared/datasets
    python examples/demo.py --nodes 50000 --epochs 50 --threads 2

The default graph is generated here (nothing is downloaded): a stochastic block model with
--classes communities (most edges inside a community, power-law-ish degrees) and node features
that are noisy class prototypes, so the labels are learnable from features and neighbourhoods
together. Both libraries' models start from the same weights (gnnfuse's layers load PyG's
state_dict) and see the same dropout masks' distribution; the table gives test accuracy and the
median time of a training epoch (forward, backward, optimizer step). The trained gnnfuse GAT is
then scripted, saved and reloaded, and its output compared with the eager model's; finally
examples/cpp (a LibTorch program built with find_package(gnnfuse) against `cmake --install` of
this build) loads the saved model and the graph and reproduces the output in C++, as it does
for the same GAT exported with torch.export and compiled ahead of time by AOTInductor.
Exits non-zero if a deployed model disagrees or an accuracy is at chance level.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import warnings
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO_ROOT = Path(__file__).resolve().parent.parent


def import_gnnfuse():
    try:
        import gnnfuse
        import gnnfuse.nn
        return gnnfuse
    except ImportError:
        sys.path.insert(0, str(REPO_ROOT / "python"))
        import gnnfuse
        import gnnfuse.nn
        return gnnfuse


# ---------------------------------------------------------------- data
def sbm_graph(n: int, classes: int, avg_degree: float, feature_dim: int, seed: int):
    """Citation-like graph: a degree-corrected stochastic block model (undirected, no duplicate
    edges), labels = blocks, features = 0.3 * prototype of the class + N(0, 1) noise."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=gen)
    # power-law-ish propensities: a few hubs, many low-degree nodes
    theta = torch.rand(n, generator=gen).clamp_min(1e-3).pow(-0.6)
    theta = theta / theta.mean()
    m = int(n * avg_degree / 2)
    src = torch.multinomial(theta, m, replacement=True, generator=gen)
    same = torch.rand(m, generator=gen) < 0.7
    # an endpoint in the same block: propensity-weighted draw among that block's nodes
    order = torch.argsort(y, stable=True)
    counts = torch.bincount(y, minlength=classes)
    starts = torch.cumsum(counts, 0) - counts
    pick = (torch.rand(m, generator=gen) * counts[y[src]]).long()
    dst_same = order[starts[y[src]] + pick]
    dst_any = torch.multinomial(theta, m, replacement=True, generator=gen)
    dst = torch.where(same, dst_same, dst_any)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    key = torch.unique(torch.minimum(src, dst) * n + torch.maximum(src, dst))
    a, b = key // n, key % n
    edge_index = torch.stack([torch.cat([a, b]), torch.cat([b, a])])
    protos = torch.randn(classes, feature_dim, generator=gen)
    x = 0.3 * protos[y] + torch.randn(n, feature_dim, generator=gen)
    # split: 20 labelled nodes per class, 500 validation, the rest test (at most 5000)
    perm = torch.randperm(n, generator=gen)
    train = torch.zeros(n, dtype=torch.bool)
    for c in range(classes):
        train[perm[y[perm] == c][:20]] = True
    rest = perm[~train[perm]]
    val = torch.zeros(n, dtype=torch.bool)
    val[rest[:500]] = True
    test = torch.zeros(n, dtype=torch.bool)
    test[rest[500:5500]] = True
    return edge_index, x, y, train, val, test


def planetoid(name: str, root: Path):
    """Cora / CiteSeer / PubMed from ../shared/datasets/planetoid/converted (Planetoid split)."""
    d = root / "planetoid" / "converted"
    if not d.exists():
        sys.exit(f"error: {d} not found (pass --root, the folder holding planetoid/)")

    def mtx(path: Path):
        rows, cols, vals, shape = [], [], [], None
        for line in path.read_text().splitlines():
            if line.startswith("%"):
                continue
            parts = line.split()
            if shape is None:
                shape = (int(parts[0]), int(parts[1]))
                continue
            rows.append(int(parts[0]) - 1)
            cols.append(int(parts[1]) - 1)
            vals.append(float(parts[2]) if len(parts) > 2 else 1.0)
        return torch.tensor(rows), torch.tensor(cols), torch.tensor(vals), shape

    r, c, _, (n, _) = mtx(d / f"{name}.adj.mtx")
    edge_index = torch.stack([torch.cat([r, c]), torch.cat([c, r])])
    edge_index = torch.unique(edge_index, dim=1)
    feat = d / (f"{name}.features.mtx" if name != "pubmed" else "pubmed.features_partial.mtx")
    fr, fc, fv, (_, f) = mtx(feat)
    x = torch.zeros(n, f)
    x[fr, fc] = fv
    x = x / x.sum(1, keepdim=True).clamp_min(1)  # row-normalised bag of words, as Planetoid
    if name == "pubmed":  # most PubMed features are missing (datasets README): random stand-ins
        missing = x.abs().sum(1) == 0
        x[missing] = torch.rand(int(missing.sum()), f, generator=torch.Generator().manual_seed(0)) / f
    y = torch.tensor([int(v) for v in (d / f"{name}.labels.txt").read_text().split()])
    masks = {k: torch.zeros(n, dtype=torch.bool) for k in ("train", "val", "test")}
    for line in (d / f"{name}.split.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        i, part = line.split()
        masks[part][int(i)] = True
    labelled = y >= 0
    y = y.clamp_min(0)
    return edge_index, x, y, masks["train"] & labelled, masks["val"] & labelled, masks["test"] & labelled


# ---------------------------------------------------------------- models
class GCN(torch.nn.Module):
    def __init__(self, conv, f_in: int, hidden: int, classes: int):
        super().__init__()
        self.conv1 = conv(f_in, hidden)
        self.conv2 = conv(hidden, classes)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


class GAT(torch.nn.Module):
    def __init__(self, conv, f_in: int, hidden: int, heads: int, classes: int):
        super().__init__()
        self.conv1 = conv(f_in, hidden, heads=heads, dropout=0.6)
        self.conv2 = conv(hidden * heads, classes, heads=1, dropout=0.6)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, p=0.6, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.6, training=self.training)
        return self.conv2(x, edge_index)


def progress(label: str, i: int, total: int, extra: str = "") -> None:
    width = 30
    done = int(width * (i + 1) / total)
    end = "\n" if i + 1 == total else ""
    print(f"\r  {label:<18} [{'#' * done}{'.' * (width - done)}] {i + 1:>4}/{total} {extra}", end=end, flush=True)


def train(label: str, model, data, epochs: int, lr: float, weight_decay: float):
    edge_index, x, y, train_mask, val_mask, test_mask = data
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    times, best_val, test_at_best = [], -1.0, 0.0
    for epoch in range(epochs):
        model.train()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x, edge_index)[train_mask], y[train_mask])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        if epoch % 5 == 4 or epoch + 1 == epochs:
            model.eval()
            with torch.no_grad():
                pred = model(x, edge_index).argmax(1)
            val = float((pred[val_mask] == y[val_mask]).float().mean())
            if val > best_val:
                best_val, test_at_best = val, float((pred[test_mask] == y[test_mask]).float().mean())
        progress(label, epoch, epochs, f"loss {float(loss.detach()):.3f}")
    return test_at_best, 1e3 * statistics.median(times[1:] if len(times) > 1 else times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="gnnfuse demo", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dataset", default="sbm", choices=["sbm", "cora", "citeseer", "pubmed"])
    ap.add_argument("--root", default=str(REPO_ROOT.parent / "shared" / "datasets"), help="folder holding planetoid/")
    ap.add_argument("--nodes", type=int, default=30000, help="sbm: nodes")
    ap.add_argument("--classes", type=int, default=8, help="sbm: classes (blocks)")
    ap.add_argument("--avg-degree", type=float, default=12.0, help="sbm: mean degree")
    ap.add_argument("--features", type=int, default=128, help="sbm: feature width")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--hidden", type=int, default=64, help="GCN hidden width (GAT: 8 per head)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-pyg", action="store_true", help="skip the torch_geometric models")
    ap.add_argument("--out", default=str(REPO_ROOT / "build" / "demo"), help="where the scripted GAT is saved")
    ap.add_argument("--no-cpp", action="store_true", help="skip building and running examples/cpp")
    ap.add_argument("--no-aoti", action="store_true", help="skip torch.export + AOTInductor packaging")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    gnnfuse = import_gnnfuse()
    if args.threads:
        torch.set_num_threads(args.threads)
    pyg_nn = None
    if not args.no_pyg:
        try:
            import torch_geometric.nn as pyg_nn  # noqa: F811
        except ImportError:
            print("torch_geometric not importable: gnnfuse models only")

    if args.dataset == "sbm":
        data = sbm_graph(args.nodes, args.classes, args.avg_degree, args.features, args.seed)
    else:
        data = planetoid(args.dataset, Path(args.root))
    edge_index, x, y, train_mask, val_mask, test_mask = data
    classes = int(y.max()) + 1
    print(f"gnnfuse demo: {args.dataset}  N={x.size(0):,}  E={edge_index.size(1):,}  F={x.size(1)}  "
          f"classes={classes}  train/val/test={int(train_mask.sum())}/{int(val_mask.sum())}/{int(test_mask.sum())}  "
          f"threads={torch.get_num_threads()}  torch {torch.__version__}")

    builders = {
        "GCN": lambda conv: GCN(conv, x.size(1), args.hidden, classes),
        "GAT": lambda conv: GAT(conv, x.size(1), 8, args.heads, classes),
    }
    rows, trained = [], {}
    for name, build in builders.items():
        torch.manual_seed(args.seed)
        ours = build(getattr(gnnfuse.nn, name + "Conv"))
        theirs = None
        if pyg_nn is not None:
            torch.manual_seed(args.seed)
            theirs = build(getattr(pyg_nn, name + "Conv"))
            ours.load_state_dict(theirs.state_dict(), strict=True)  # same starting weights
        lr, wd = (0.01, 5e-4) if name == "GCN" else (0.005, 5e-4)
        torch.manual_seed(args.seed + 1)
        acc, ms = train(f"{name} gnnfuse", ours, data, args.epochs, lr, wd)
        rows.append((name, "gnnfuse", acc, ms))
        trained[name] = ours
        if theirs is not None:
            torch.manual_seed(args.seed + 1)
            acc_p, ms_p = train(f"{name} PyG", theirs, data, args.epochs, lr, wd)
            rows.append((name, "torch_geometric", acc_p, ms_p))

    print(f"\n{'model':<6} {'library':<16} {'test acc':>9} {'epoch ms':>10} {'speedup':>8}")
    base = {m: ms for m, lib, _, ms in rows if lib == "torch_geometric"}
    ok = True
    for m, lib, acc, ms in rows:
        sp = f"{base[m] / ms:.2f}x" if lib == "gnnfuse" and m in base else ""
        print(f"{m:<6} {lib:<16} {acc:>9.3f} {ms:>10.1f} {sp:>8}")
        if acc < 1.5 / classes:
            print(f"  error: {m} ({lib}) is at chance level", file=sys.stderr)
            ok = False

    # Deployment: script the trained gnnfuse GAT, save, reload, compare.
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    gat = trained["GAT"].eval()
    scripted = torch.jit.script(gat)
    path = out_dir / "gat_scripted.pt"
    scripted.save(str(path))
    loaded = torch.jit.load(str(path))
    with torch.no_grad():
        ref = gat(x, edge_index)
        got = loaded(x, edge_index)
    err = float((got - ref).abs().max())
    calls = sorted(set(re.findall(r"gnnfuse::\w+", str(loaded.inlined_graph))))
    print(f"\nTorchScript: saved {path} ({path.stat().st_size / 1024:.0f} KiB); reloaded output max |diff| = {err:.2e}; "
          f"ops in its graph: {', '.join(calls)}")
    if not err <= 1e-5 * max(1.0, float(ref.abs().max())):
        print("error: the reloaded TorchScript model disagrees with the eager model", file=sys.stderr)
        ok = False

    # C++: the same scripted model loaded by a LibTorch program built with find_package(gnnfuse),
    # on the graph and features written here (buffers of a scripted module), checked against ref.
    inputs = out_dir / "gat_inputs.pt"
    torch.jit.script(TensorFile(x=x, edge_index=edge_index, expected=ref)).save(str(inputs))
    # torch.export of the same model, compiled ahead of time by AOTInductor into a package.
    package = None
    if not args.no_aoti:
        try:
            warnings.filterwarnings("ignore", category=FutureWarning)  # pytree deprecation noise
            exported = torch.export.export(gat, (x, edge_index))
            package = Path(torch._inductor.aoti_compile_and_package(exported, package_path=str(out_dir / "gat.pt2")))
            with torch.no_grad():
                got_aoti = torch._inductor.aoti_load_package(str(package))(x, edge_index)
            err_aoti = float((got_aoti - ref).abs().max())
            print(f"AOTInductor: exported (torch.export) and compiled {package}; output max |diff| = {err_aoti:.2e}")
            if not err_aoti <= 1e-4 * max(1.0, float(ref.abs().max())):
                print("error: the AOTInductor package disagrees with the eager model", file=sys.stderr)
                ok = False
        except Exception as e:  # noqa: BLE001 - reported, the demo goes on
            print(f"error: AOTInductor packaging failed: {e}", file=sys.stderr)
            ok, package = False, None
    if args.no_cpp:
        return 0 if ok else 1
    if shutil.which("cmake") is None:
        print("cmake not found: C++ example skipped")
        return 0 if ok else 1
    print("building examples/cpp against the installed gnnfuse (cmake --install, find_package) ...", flush=True)
    env = dict(os.environ, PYTHON=sys.executable)
    cpp_args = [str(path), str(inputs)] + ([str(package)] if package is not None else [])
    run = subprocess.run(["bash", str(REPO_ROOT / "examples" / "cpp" / "build_and_run.sh"), *cpp_args],
                         env=env, text=True, capture_output=True)
    print(run.stdout.rstrip())
    if run.returncode != 0:
        print(f"error: the C++ example failed (exit {run.returncode}):\n{run.stderr}", file=sys.stderr)
        ok = False
    return 0 if ok else 1


class TensorFile(torch.nn.Module):
    """Tensors saved as buffers of a scripted module: readable from C++ with torch::jit::load."""

    def __init__(self, **tensors: torch.Tensor):
        super().__init__()
        for k, v in tensors.items():
            self.register_buffer(k, v.detach().contiguous())

    def forward(self) -> int:
        return 0


if __name__ == "__main__":
    sys.exit(main())
