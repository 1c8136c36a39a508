"""Graph loaders for the gnnfuse benchmarks and demo.

Every loader returns ``(edge_index, num_nodes)`` with ``edge_index`` a PyG-style
``torch.int64`` tensor of shape ``[2, E]``: row 0 = source j, row 1 = target i
(messages flow j -> i). Node ids are contiguous in ``0..num_nodes-1``.

The data files are never copied into the repository; they are read in place from
a dataset root (default ``<repo>/../shared/datasets``, see ``default_root``; layout
and provenance in that folder's README.md).

Graphs
------
* ``cora``, ``citeseer``, ``pubmed``
                            planetoid/converted/<name>.adj.mtx (Matrix Market pattern,
                            both directions listed): 2708 / 10556, 3327 / 9104, 19717 / 88648.
* ``ca-HepPh``              snap/ca-HepPh.noheader.txt.gz, undirected collaboration graph:
                            symmetrised and de-duplicated (self-loops kept): 12008 / 237010.
* ``soc-Slashdot0902``      snap/soc-Slashdot0902.txt.gz, directed, kept as given
                            (self-loops kept): 82168 / 948464.
* ``copter2``               metis-debian/copter2.graph.gz, METIS adjacency lists (3-D mesh,
                            both directions listed): 55476 / 704476.
* ``luxembourg_osm``        suitesparse/luxembourg_osm.noheader.txt.gz, Matrix Market body
                            without header (lower triangle of a symmetric road network, N fixed
                            at 114599): symmetrised, 114599 / 239332.
* ``rmat-<scale>-<ef>``     synthetic R-MAT graph (``rmat``), e.g. ``rmat-20-16``.
* ``reddit-like``           Reddit's size and in-degree distribution, generated (``reddit_like``):
                            232,965 nodes, about 114.6M edges (mean in-degree 492, log-normal,
                            capped at Reddit's largest, 21,657); ``reddit-like-<nodes>-<mean degree>``
                            the same distribution scaled down (e.g. ``reddit-like-2000-50``).
* ``products-like``         ogbn-products' size as an undirected R-MAT (``rmat_sized``): 2,449,029
                            nodes, 61,859,140 directed edges (both directions of 30,929,570 R-MAT
                            edges); ``products-like-<nodes>-<mean degree>`` scaled down. R-MAT's
                            skew leaves about a third of the nodes isolated and makes hubs of ~10^5
                            edges: its other rows are denser than ogbn-products' co-purchase graph.

The two generated stand-ins exist because the real Reddit and ogbn-products cannot be downloaded
where the GPU benchmarks run (issue 26's "Reddit scale" and "ogbn-products scale" targets).

Text is parsed with numpy's C text scanner (``np.fromstring(..., sep=' ')``) after
stripping comment lines; soc-Slashdot0902 (~950k edges) loads in well under a second.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import warnings
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent

#: real graphs known to ``load``: name -> (relative path, format, undirected?)
REAL_GRAPHS = {
    "cora": ("planetoid/converted/cora.adj.mtx", "mtx", True),
    "citeseer": ("planetoid/converted/citeseer.adj.mtx", "mtx", True),
    "pubmed": ("planetoid/converted/pubmed.adj.mtx", "mtx", True),
    "ca-HepPh": ("snap/ca-HepPh.noheader.txt.gz", "edgelist", True),
    "soc-Slashdot0902": ("snap/soc-Slashdot0902.txt.gz", "edgelist", False),
    "copter2": ("metis-debian/copter2.graph.gz", "metis", True),
    "luxembourg_osm": ("suitesparse/luxembourg_osm.noheader.txt.gz", "mtx-body:114599", True),
}

#: the graphs the benchmark runs by default, in order
BENCH_GRAPHS = ["cora", "pubmed", "ca-HepPh", "soc-Slashdot0902", "rmat-20-16"]

_RMAT_RE = re.compile(r"^rmat-(\d+)-(\d+)$")
# reddit-like / products-like, optionally scaled: <kind>-<nodes>-<mean degree>
_SIZED_RE = re.compile(r"^(reddit|products)-like(?:-(\d+)-(\d+(?:\.\d+)?))?$")

#: Reddit (GraphSAGE's, as in PyG's Reddit dataset): nodes, directed edges, largest in-degree
REDDIT_NODES, REDDIT_EDGES, REDDIT_MAX_DEGREE = 232965, 114615892, 21657
#: ogbn-products: nodes, directed edges (each undirected edge in both directions)
PRODUCTS_NODES, PRODUCTS_EDGES = 2449029, 61859140


def default_root() -> Path:
    """``$GNNFUSE_DATASETS`` if set, else ``<repo>/../shared/datasets``."""
    env = os.environ.get("GNNFUSE_DATASETS")
    if env:
        return Path(env)
    return (REPO_ROOT / ".." / "shared" / "datasets").resolve()


# ----------------------------------------------------------------------------
# text parsing


def _read_bytes(path: Path) -> bytes:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return f.read()
    return path.read_bytes()


def _parse_ints(raw: bytes, what: str) -> np.ndarray:
    """All whitespace-separated integers of ``raw`` after dropping '#'/'%' comment lines."""
    # Comment lines normally only head the file: skip them cheaply.
    pos = 0
    n = len(raw)
    while pos < n and raw[pos:pos + 1] in (b"#", b"%", b"\n", b"\r"):
        nl = raw.find(b"\n", pos)
        pos = n if nl < 0 else nl + 1
    body = raw[pos:]
    if b"#" in body or b"%" in body:  # comments further down: filter line by line (slow path)
        body = b"\n".join(ln for ln in body.split(b"\n") if not ln.lstrip().startswith((b"#", b"%")))
    with warnings.catch_warnings():
        # numpy reports a partial parse with a DeprecationWarning: make it an error
        warnings.simplefilter("error")
        try:
            vals = np.fromstring(body, dtype=np.int64, sep=" ")  # text mode: C scanner, any whitespace
        except (DeprecationWarning, ValueError) as e:
            raise ValueError(f"{what}: cannot parse integer text ({e})") from None
    return vals


def _relabel(src: np.ndarray, dst: np.ndarray):
    """Map arbitrary non-negative ids to 0..N-1 (ascending order of the original ids)."""
    ids, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    inv = inv.astype(np.int64, copy=False).reshape(-1)
    return inv[: src.size], inv[src.size:], int(ids.size)


def _symmetrize(src: np.ndarray, dst: np.ndarray, num_nodes: int):
    """Both directions of every edge, duplicates removed (self-loops kept once)."""
    s = np.concatenate([src, dst])
    d = np.concatenate([dst, src])
    key = np.unique(s * num_nodes + d)
    return key // num_nodes, key % num_nodes


def _to_edge_index(src: np.ndarray, dst: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.stack([src, dst]).astype(np.int64, copy=False))


def read_mtx(path: Path):
    """Matrix Market coordinate file (pattern or real; general or symmetric).

    Entry ``(r, c)`` becomes the edge r -> c (source r, target c). For ``symmetric``
    files the mirror of each off-diagonal entry is added. Returns (src, dst, num_nodes).
    """
    raw = _read_bytes(path)
    banner = raw[: raw.find(b"\n")].decode("ascii", "replace").lower()
    if not banner.startswith("%%matrixmarket matrix coordinate"):
        raise ValueError(f"{path}: not a Matrix Market coordinate file ({banner!r})")
    ncols = 2 if "pattern" in banner else 3
    if "complex" in banner:
        raise ValueError(f"{path}: complex matrices are not graphs")
    if ncols == 3:  # values may be reals: parse the index columns only
        lines = [ln.split() for ln in raw.decode().splitlines() if ln and not ln.startswith("%")]
        rows, cols, nnz = map(int, lines[0][:3])
        body = np.array([[int(t[0]), int(t[1])] for t in lines[1:]], dtype=np.int64).reshape(-1, 2)
    else:
        vals = _parse_ints(raw, str(path))
        rows, cols, nnz = (int(v) for v in vals[:3])
        body = vals[3:].reshape(-1, 2)
    if body.shape[0] != nnz:
        raise ValueError(f"{path}: header says {nnz} entries, found {body.shape[0]}")
    if rows != cols:
        raise ValueError(f"{path}: not square ({rows} x {cols})")
    src = body[:, 0] - 1
    dst = body[:, 1] - 1
    if "symmetric" in banner:
        off = src != dst
        src, dst = np.concatenate([src, dst[off]]), np.concatenate([dst, src[off]])
    return src, dst, rows


def read_edgelist(path: Path):
    """SNAP-style text edge list ('#' comments, whitespace separated, CRLF ok).

    Returns (src, dst) with the original (possibly non-contiguous) ids.
    """
    vals = _parse_ints(_read_bytes(path), str(path))
    if vals.size % 2:
        raise ValueError(f"{path}: odd number of integers ({vals.size})")
    pairs = vals.reshape(-1, 2)
    return pairs[:, 0].copy(), pairs[:, 1].copy()


def read_metis(path: Path):
    """METIS graph file: ``n m [fmt]`` then line i lists the 1-based neighbours of node i
    (unweighted graphs only). Returns (src, dst, num_nodes): neighbour -> node."""
    lines = [ln for ln in _read_bytes(path).decode("ascii").splitlines() if not ln.startswith("%")]
    head = lines[0].split()
    n = int(head[0])
    if len(head) > 2 and int(head[2]) != 0:
        raise ValueError(f"{path}: weighted METIS graphs (fmt {head[2]}) are not read")
    if len(lines) - 1 < n:
        raise ValueError(f"{path}: {n} nodes announced, {len(lines) - 1} adjacency lines")
    src, dst = [], []
    for i, ln in enumerate(lines[1:n + 1]):
        nb = np.array(ln.split(), dtype=np.int64)
        src.append(nb - 1)
        dst.append(np.full(nb.size, i, np.int64))
    return np.concatenate(src), np.concatenate(dst), n


# ----------------------------------------------------------------------------
# public loaders


def load_real(name: str, root: str | os.PathLike | None = None):
    """Load one of ``REAL_GRAPHS``. Returns (edge_index int64 [2, E], num_nodes)."""
    if name not in REAL_GRAPHS:
        raise KeyError(f"unknown graph {name!r}; known: {sorted(REAL_GRAPHS)} , rmat-<scale>-<edge_factor>, reddit-like or products-like (each also -<nodes>-<mean degree>)")
    rel, fmt, undirected = REAL_GRAPHS[name]
    path = Path(root if root is not None else default_root()) / rel
    if not path.exists():
        raise FileNotFoundError(f"{name}: {path} not found (dataset root: pass --root or set GNNFUSE_DATASETS)")
    if fmt == "mtx":
        src, dst, n = read_mtx(path)
    elif fmt == "metis":
        src, dst, n = read_metis(path)
    elif fmt.startswith("mtx-body:"):  # 1-based pairs, size from the dataset README
        n = int(fmt.split(":")[1])
        src, dst = read_edgelist(path)
        src, dst = src - 1, dst - 1
        if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            raise ValueError(f"{path}: node ids outside 1..{n}")
    else:
        src, dst = read_edgelist(path)
        src, dst, n = _relabel(src, dst)
    if undirected:
        src, dst = _symmetrize(src, dst, n)
    return _to_edge_index(src, dst), n


def rmat(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19, c: float = 0.19,
         seed: int = 0, permute: bool = True):
    """R-MAT graph with ``N = 2**scale`` nodes and ``E = edge_factor * N`` directed edges.

    Each edge picks one quadrant of the adjacency matrix per bit level, with
    probabilities (a, b, c, d = 1-a-b-c) for (top-left, top-right, bottom-left,
    bottom-right), all edges at once (vectorised, one pass per bit). Defaults are
    the Graph500 parameters. Row index = source, column index = target.
    Duplicate edges and self-loops are kept (as in Graph500), so E is exact.
    With ``permute`` the node labels are randomly permuted (as in Graph500) so that
    the high-degree nodes are not clustered at small ids.

    Returns (edge_index int64 [2, E], num_nodes). Scale 20, edge factor 16
    (1M nodes, 16.8M edges) takes a few seconds and ~0.5 GB.
    """
    d = 1.0 - a - b - c
    if min(a, b, c, d) < 0:
        raise ValueError("rmat: a, b, c must be non-negative with a+b+c <= 1")
    if not (0 < scale <= 40):
        raise ValueError(f"rmat: scale out of range (got {scale})")
    n = 1 << scale
    e = edge_factor * n
    rng = np.random.default_rng(seed)
    src = np.zeros(e, np.int64)
    dst = np.zeros(e, np.int64)
    p_row1 = np.float32(c + d)                    # P(source bit = 1)
    p_col1_r0 = np.float32(b / (a + b)) if a + b > 0 else np.float32(0)  # P(target bit = 1 | source bit 0)
    p_col1_r1 = np.float32(d / (c + d)) if c + d > 0 else np.float32(0)  # P(target bit = 1 | source bit 1)
    buf = np.empty(e, np.float32)
    for level in range(scale):
        rng.random(out=buf, dtype=np.float32)
        row1 = buf < p_row1
        rng.random(out=buf, dtype=np.float32)
        col1 = buf < np.where(row1, p_col1_r1, p_col1_r0)
        src |= row1.astype(np.int64) << level
        dst |= col1.astype(np.int64) << level
    del buf
    if permute:
        perm = rng.permutation(n)
        src = perm[src]
        dst = perm[dst]
    return _to_edge_index(src, dst), n


def reddit_like(n: int, mean_degree: float, max_degree: int, device="cpu", seed: int = 0):
    """(rowptr int32, col int32) of n destinations with log-normal in-degrees (mean `mean_degree`,
    at most `max_degree`) and sources drawn in proportion to their in-degree (hubs send as they
    receive): CSR by destination, the sources of a row unsorted. Generated on `device` (a GPU makes
    Reddit's 115M edges in about a second; the CPU takes tens of seconds)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    sigma = 1.2
    mu = math.log(mean_degree) - sigma * sigma / 2
    deg = torch.exp(mu + sigma * torch.randn(n, generator=gen, device=device, dtype=torch.float64))
    deg = deg.round().clamp(1, max_degree)
    deg = (deg * (mean_degree * n / deg.sum())).round().clamp(1, max_degree).to(torch.int64)
    rowptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    rowptr[1:] = torch.cumsum(deg, 0)
    e = int(rowptr[-1])
    cdf = torch.cumsum(deg.double(), 0)
    cdf /= cdf[-1].clone()
    col = torch.empty(e, dtype=torch.int32, device=device)
    chunk = 1 << 24
    for s in range(0, e, chunk):  # inverse-CDF sampling in chunks (bounded temporaries)
        u = torch.rand(min(chunk, e - s), generator=gen, device=device, dtype=torch.float64)
        col[s:s + u.numel()] = torch.searchsorted(cdf, u).clamp_max(n - 1).to(torch.int32)
    return rowptr.to(torch.int32), col


def rmat_sized(num_nodes: int, num_edges: int, symmetric: bool = True, seed: int = 0, device="cpu",
               a: float = 0.57, b: float = 0.19, c: float = 0.19):
    """R-MAT graph of exactly `num_nodes` nodes and `num_edges` directed edges, for sizes that are
    not a power of two (ogbn-products'): R-MAT edges (``rmat``'s Graph500 parameters, one quadrant
    per bit level) over the next power of two, labels permuted, each label folded onto
    ``label % num_nodes`` (every node takes one or two R-MAT nodes; the degree distribution stays
    heavy-tailed). ``symmetric``: num_edges / 2 R-MAT edges and their reverses (an undirected graph
    stored in both directions, as ogbn-products is; num_edges must be even). Drawn with torch on
    `device` (a GPU makes ogbn-products' 62M edges in well under a second, the CPU in tens of
    seconds; the two draw different graphs of the same law). Returns (edge_index int64 [2, E] on
    `device`, num_nodes)."""
    if symmetric and num_edges % 2:
        raise ValueError(f"rmat_sized: a symmetric graph has an even number of directed edges, got {num_edges}")
    scale = max(1, (num_nodes - 1).bit_length())
    e = num_edges // 2 if symmetric else num_edges
    d = 1.0 - a - b - c
    gen = torch.Generator(device=device).manual_seed(seed)
    src = torch.zeros(e, dtype=torch.int64, device=device)
    dst = torch.zeros(e, dtype=torch.int64, device=device)
    for level in range(scale):
        row1 = torch.rand(e, generator=gen, device=device) < c + d  # source bit 1
        # target bit 1, given the source bit
        col1 = torch.rand(e, generator=gen, device=device) < torch.where(row1, d / (c + d), b / (a + b))
        src |= row1.to(torch.int64) << level
        dst |= col1.to(torch.int64) << level
        del row1, col1
    perm = torch.randperm(1 << scale, generator=gen, device=device) % num_nodes
    ei = torch.stack([perm[src], perm[dst]])
    del src, dst
    if symmetric:
        ei = torch.cat([ei, ei.flip(0)], 1)
    return ei, num_nodes


def sized_graph(name: str, device="cpu", seed: int = 0):
    """``reddit-like`` / ``products-like`` (optionally ``-<nodes>-<mean degree>``), generated on
    `device`: (edge_index int64 [2, E] on `device`, num_nodes); None for other names."""
    m = _SIZED_RE.match(name)
    if not m:
        return None
    kind, nodes, mean = m.group(1), m.group(2), m.group(3)
    if kind == "reddit":
        n = int(nodes) if nodes else REDDIT_NODES
        rowptr, col = reddit_like(n, float(mean) if mean else REDDIT_EDGES / REDDIT_NODES, min(REDDIT_MAX_DEGREE, n), device, seed)
        dst = torch.repeat_interleave(torch.arange(n, device=device), rowptr.long().diff())
        return torch.stack([col.long(), dst]), n
    n = int(nodes) if nodes else PRODUCTS_NODES
    e = 2 * round(float(mean) * n / 2) if nodes else PRODUCTS_EDGES
    return rmat_sized(n, e, symmetric=True, seed=seed, device=device)


def load(name: str, root: str | os.PathLike | None = None, seed: int = 0):
    """Load a real graph by name or generate ``rmat-<scale>-<edge_factor>``, ``reddit-like`` or
    ``products-like`` (each optionally ``-<nodes>-<mean degree>``)."""
    m = _RMAT_RE.match(name)
    if m:
        return rmat(int(m.group(1)), int(m.group(2)), seed=seed)
    sized = sized_graph(name, "cpu", seed)
    if sized is not None:
        return sized
    return load_real(name, root)


if __name__ == "__main__":  # quick self-check: python bench/datasets.py [--root DIR] [names...]
    import argparse
    import time

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", default=BENCH_GRAPHS)
    ap.add_argument("--root", default=None)
    args = ap.parse_args()
    for nm in args.names:
        t0 = time.perf_counter()
        ei, n = load(nm, args.root)
        dt = time.perf_counter() - t0
        loops = int((ei[0] == ei[1]).sum())
        print(f"{nm:18s} N={n:>9,d} E={ei.size(1):>11,d} self-loops={loops:>6,d} "
              f"max-in-deg={int(torch.bincount(ei[1], minlength=n).max()):>7,d} load {dt:6.2f} s")
