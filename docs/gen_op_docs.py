"""One Markdown page per op, generated from its spec by the generator itself
(`gnnfuse-gen --dump`): the spec, the index expression, the decomposition, the index trees after
every stage (iteration spaces, trie fusion, temporary shrinking, CPU schedule) and the same for
every op derived from it (the adjoints of its backward, the shared row statistics).

    python docs/gen_op_docs.py [--gen build/gnnfuse-gen] [--out build/docs/ops]

The pages are build output (never committed): regenerate them after changing a spec.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def page(spec: Path, gen: Path) -> str:
    dump = subprocess.run([str(gen), "--dump", str(spec)], check=True, capture_output=True, text=True).stdout
    blocks = re.split(r"^==== ", dump, flags=re.M)[1:]
    out = []
    for block in blocks:
        title, _, body = block.partition("\n")
        name = title.split(" ")[0]
        expr = re.search(r"^expr\s+(.*)$", body, flags=re.M)
        doc = re.search(r"^doc\s+(.*)$", body, flags=re.M)
        derived = "derived from" in title
        out.append(f"{'###' if derived else '#'} `{name}`{' (derived)' if derived else ''}\n")
        if doc:
            out.append(doc.group(1) + "\n")
        if expr:
            out.append(f"```\n{expr.group(1)}\n```\n")
        costs = re.findall(r"^---- (?:variant (\d+): )?cost model\n(.*)$", body, flags=re.M)
        if len(costs) > 1:  # variants auto: one lowering per association, the cheapest runs
            out.append("Lowerings chosen per call by their cost models (n_v: extents, nnz_S: stored entries):\n")
            out += [f"- variant {v or 0}: `{c}`" for v, c in costs]
            out.append("")
        out.append("<details><summary>spec, index trees after every stage</summary>\n\n```\n" + body.rstrip() + "\n```\n</details>\n")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gen", default=str(ROOT / "build" / "gnnfuse-gen"))
    ap.add_argument("--out", default=str(ROOT / "build" / "docs" / "ops"))
    args = ap.parse_args(argv)
    gen, out = Path(args.gen), Path(args.out)
    if not gen.exists():
        sys.exit(f"error: {gen} not found (build first: pip install --no-build-isolation -e .)")
    out.mkdir(parents=True, exist_ok=True)
    index = ["# gnnfuse ops\n", "| op | expression | backends | dtypes | index dtypes |", "|---|---|---|---|---|"]
    for spec in sorted((ROOT / "ops").glob("*.spec")):
        text = page(spec, gen)
        (out / f"{spec.stem}.md").write_text(text)
        expr = re.search(r"^```\n(.*)\n```", text, flags=re.M)
        src = spec.read_text()
        dtypes = re.search(r"^dtypes\s+(.*)$", src, flags=re.M)
        itypes = re.search(r"^index\s+(.*)$", src, flags=re.M)
        index.append(
            f"| [{spec.stem}]({spec.stem}.md) | `{expr.group(1) if expr else ''}` | CPU (generated) "
            f"| {dtypes.group(1) if dtypes else ''} | {itypes.group(1) if itypes else ''} |"
        )
    (out / "README.md").write_text("\n".join(index) + "\n")
    print(f"wrote {len(index) - 3} op pages to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
