#!/usr/bin/env python3
"""Data-parallel GAT training over sampled mini-batches with torch.distributed.

    python examples/distributed_gat.py --world-size 2            # gloo on CPU, 2 processes
    python examples/distributed_gat.py --world-size 2 --check    # + gradient agreement check

Each process holds the graph (here the demo's generated block-model graph), draws the same
global batch of training nodes each step, takes its shard of it, samples a two-hop
neighbourhood of its seed nodes (`NeighborSampler` below: up to --fanout in-neighbours per node
and hop, the graph's CSR walked directly) and trains a two-layer GAT of gnnfuse layers on the
sampled subgraph; DistributedDataParallel averages the gradients over the processes (gloo on
CPU, NCCL when every process has a GPU).

With --check, rank 0 recomputes the first step in one process, shard by shard, on a copy of the
model and asserts that the averaged gradients equal DDP's.

Nothing here can wait forever: every collective gives up after --timeout seconds (gloo's default
is 30 minutes), a worker whose teardown outlives it prints every thread's stack and exits, and
with --deadline the launcher terminates workers still running past it and fails, naming them.
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "examples"))
sys.path.insert(0, str(REPO_ROOT / "python"))

import gnnfuse  # noqa: E402
import gnnfuse.nn  # noqa: E402
from demo import GAT, sbm_graph  # noqa: E402


class NeighborSampler:
    """Two-hop (or k-hop) neighbourhood sampling on the CSR over targets: for each frontier node
    up to `fanout` of its in-edges, drawn without replacement by a seeded generator. Returns the
    subgraph's nodes (seeds first), its edge_index in local ids and the number of seeds."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int, fanouts):
        self.g = gnnfuse.Graph.from_edge_index(edge_index, num_nodes=num_nodes)
        self.fanouts = list(fanouts)

    def sample(self, seeds: torch.Tensor, gen: torch.Generator):
        rowptr, col = self.g.rowptr, self.g.col
        nodes = seeds.clone()
        local = {int(v): i for i, v in enumerate(nodes.tolist())}
        frontier = seeds
        src_l, dst_l = [], []
        for fanout in self.fanouts:
            new = []
            for v in frontier.tolist():
                b, e = int(rowptr[v]), int(rowptr[v + 1])
                if e == b:
                    continue
                picks = col[b:e]
                if e - b > fanout:
                    picks = picks[torch.randperm(e - b, generator=gen)[:fanout]]
                for u in picks.tolist():
                    if u not in local:
                        local[u] = len(local)
                        new.append(u)
                    src_l.append(local[u])
                    dst_l.append(local[v])
            frontier = torch.tensor(new, dtype=torch.long)
            if new:
                nodes = torch.cat([nodes, frontier])
        edge_index = torch.tensor([src_l, dst_l], dtype=torch.long).view(2, -1)
        return nodes, edge_index, seeds.numel()


def shard_loss(model, data, sampler, seeds, step: int, rank: int):
    _, x, y, *_ = data
    gen = torch.Generator().manual_seed(1000 * step + rank)
    nodes, sub_ei, n_seeds = sampler.sample(seeds, gen)
    out = model(x[nodes], sub_ei)
    return F.cross_entropy(out[:n_seeds], y[nodes[:n_seeds]])


def global_batch(train_idx: torch.Tensor, step: int, batch: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(step)
    return train_idx[torch.randperm(train_idx.numel(), generator=gen)[:batch]]


def worker(rank: int, args, init_file: str, result_queue) -> None:
    # A store file of this run only (the launcher's fresh temporary folder); collectives, the
    # store and the barrier below raise after --timeout instead of hanging.
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=args.timeout))
    torch.set_num_threads(1)
    data = sbm_graph(args.nodes, args.classes, 10.0, args.features, seed=0)
    edge_index, x, y, train_mask, val_mask, test_mask = data
    train_idx = torch.nonzero(train_mask | val_mask).view(-1)  # a larger labelled pool for the example
    sampler = NeighborSampler(edge_index, x.size(0), [args.fanout, args.fanout])
    torch.manual_seed(0)
    model = GAT(gnnfuse.nn.GATConv, x.size(1), 8, 4, args.classes)
    model.eval()  # dropout off: the check compares deterministic gradients
    reference = None
    if args.check and rank == 0:
        reference = GAT(gnnfuse.nn.GATConv, x.size(1), 8, 4, args.classes).eval()
        reference.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01)
    for step in range(args.steps):
        seeds = global_batch(train_idx, step, args.batch).chunk(args.world_size)
        opt.zero_grad()
        loss = shard_loss(ddp, data, sampler, seeds[rank], step, rank)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        if step == 0 and reference is not None:
            grads = [torch.zeros_like(p) for p in reference.parameters()]
            for r in range(args.world_size):
                reference.zero_grad()
                shard_loss(reference, data, sampler, seeds[r], step, r).backward()
                for g, p in zip(grads, reference.parameters()):
                    g += p.grad / args.world_size
            err = max(float((p.grad - g).abs().max()) for p, g in zip(model.parameters(), grads))
            print(f"check: DDP gradients vs single-process average over {args.world_size} shards: max |diff| = {err:.2e}")
            result_queue.put(err)
        opt.step()
        if rank == 0 and (step % 5 == 0 or step + 1 == args.steps):
            print(f"step {step:3d}  loss (rank 0 shard) {float(loss.detach()):.4f}", flush=True)
    if rank == 0:
        with torch.no_grad():
            pred = model(x, edge_index).argmax(1)  # full-graph inference
        acc = float((pred[test_mask] == y[test_mask]).float().mean())
        print(f"test accuracy after {args.steps} steps (full-graph inference): {acc:.3f}")
    # Every rank leaves together: a rank tearing gloo down while another is still busy could
    # abort in gloo's threads ("terminate called without an active exception"). The teardown,
    # the interpreter's exit included (the watchdog stays armed until Python finalises), is
    # bounded: past --timeout, faulthandler prints every thread's stack and exits with status 1.
    sys.stdout.flush()
    faulthandler.dump_traceback_later(args.timeout, exit=True)
    dist.barrier()
    dist.destroy_process_group()


def join_within(procs: mp.ProcessContext, deadline) -> bool:
    """Waits for the workers (a failing one raises, with its traceback, after the others are
    terminated); past `deadline` seconds (None: no limit) terminates those still running, says
    which, and returns False."""
    end = None if deadline is None else time.monotonic() + deadline
    while not procs.join(timeout=1.0):
        if end is not None and time.monotonic() > end:
            alive = [rank for rank, p in enumerate(procs.processes) if p.is_alive()]
            print(f"error: worker(s) of rank {alive} still running after {deadline:.0f} s: terminated", file=sys.stderr, flush=True)
            for p in procs.processes:
                if p.is_alive():
                    p.terminate()
            for p in procs.processes:
                p.join(5)
                if p.is_alive():
                    p.kill()
            return False
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--classes", type=int, default=6)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--fanout", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a collective or the teardown may wait")
    ap.add_argument("--deadline", type=float, default=None, help="seconds the workers may run in all (default: no limit)")
    args = ap.parse_args(argv)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        procs = mp.start_processes(worker, args=(args, init_file, queue), nprocs=args.world_size, join=False, start_method="spawn")
        if not join_within(procs, args.deadline):
            return 1
    if args.check:
        if queue.empty():  # put() is synchronous: after the join, the result is there or never will be
            print("error: rank 0 reported no gradient check", file=sys.stderr)
            return 1
        err = queue.get()
        if not err <= 1e-5:
            print(f"error: DDP gradients differ from the single-process ones by {err:.2e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
