#!/usr/bin/env python3
"""Compiles the library's C++ (-fsyntax-only) against another torch release's headers.

The GPU machines run torch 2.11; the project pins 2.13. Between them torch's autograd Node
moved from std::shared_ptr to c10::intrusive_ptr, and such changes only show where the code is
compiled against the other headers. This check takes every translation unit of the library from
the build's compile_commands.json (the generated CPU adapters and autograd kernels, csrc/torch,
csrc/runtime; not the generated CPU kernels, which include no torch header, the CUDA adapters,
built against torch 2.11 on the GPU machine, nor the test-op and emulated libraries), swaps the torch include folders for those of the other release and compiles it
with -fsyntax-only (templates instantiated, no code generated).

The headers come from the release's wheel on PyPI: only its `torch/include/` members (about 8 MB
of the wheel's 500), read by HTTP range requests from the zip's central directory, cached under
the build folder (never committed). Without network the check is skipped (exit 77: ctest's
SKIP_RETURN_CODE).

usage: scripts/torch_headers_check.py --build BUILD [--version 2.11.0] [--jobs 2]
"""

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import zlib

SKIP = 77
INDEX = "https://pypi.org/simple/torch/"


ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def http(url, first=None, last=None, method="GET"):
    req = urllib.request.Request(url, method=method)
    if first is not None:
        req.add_header("Range", f"bytes={first}-{last}")
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read() if method == "GET" else r.headers


def wheel_url(version):
    """A manylinux x86_64 wheel of the release (the headers are the same in every one)."""
    page = http(INDEX).decode("utf-8", "replace")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    pat = re.compile(r'href="([^"#]*/torch-' + re.escape(version) + r'-(cp3\d+)-\2-manylinux[^"#]*x86_64\.whl)')
    found = pat.findall(page)
    if not found:
        raise RuntimeError(f"no manylinux x86_64 wheel of torch {version} on {INDEX}")
    found.sort(key=lambda m: m[1] != tag)  # this Python's first
    return urllib.parse.urljoin(INDEX, found[0][0])


def central_directory(url):
    size = int(http(url, method="HEAD")["Content-Length"])
    tail = http(url, max(0, size - 65558), size - 1)
    end = tail.rfind(b"PK\x05\x06")
    if end < 0:
        raise RuntimeError("no zip end record")
    cd_size, cd_off = struct.unpack("<II", tail[end + 12:end + 20])
    if cd_off == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:  # zip64
        z = tail.rfind(b"PK\x06\x06")
        cd_size, cd_off = struct.unpack("<QQ", tail[z + 40:z + 56])
    cd = http(url, cd_off, cd_off + cd_size - 1)
    members, p = [], 0
    while cd[p:p + 4] == b"PK\x01\x02":
        method, = struct.unpack("<H", cd[p + 10:p + 12])
        csize, = struct.unpack("<I", cd[p + 20:p + 24])
        nlen, elen, clen = struct.unpack("<HHH", cd[p + 28:p + 34])
        offset, = struct.unpack("<I", cd[p + 42:p + 46])
        members.append((cd[p + 46:p + 46 + nlen].decode(), method, csize, offset))
        p += 46 + nlen + elen + clen
    return size, members


def fetch_headers(version, dest):
    """torch/include/ of the release's wheel into dest (once: a marker file records it)."""
    marker = os.path.join(dest, ".complete")
    if os.path.exists(marker):
        return
    url = wheel_url(version)
    size, members = central_directory(url)
    wanted = sorted((m for m in members if m[0].startswith("torch/include/") and not m[0].endswith("/")), key=lambda m: m[3])
    k = 0
    while k < len(wanted):  # contiguous runs of members, up to 16 MB per request
        first = wanted[k][3]
        m, last = k, first
        while m < len(wanted) and wanted[m][3] - first < (16 << 20):
            last = wanted[m][3] + 30 + len(wanted[m][0].encode()) + wanted[m][2] + 1024  # local header, name, data, slack
            m += 1
        blob = http(url, first, min(last, size - 1))
        for name, method, csize, offset in wanted[k:m]:
            q = offset - first
            nlen, elen = struct.unpack("<HH", blob[q + 26:q + 30])
            data = blob[q + 30 + nlen + elen:q + 30 + nlen + elen + csize]
            if method == 8:
                data = zlib.decompress(data, -15)
            elif method != 0:
                raise RuntimeError(f"{name}: zip method {method}")
            path = os.path.join(dest, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        k = m
    with open(marker, "w") as f:
        f.write(url + "\n")


def commands(build, include):
    """The library's compile commands with torch's include folders replaced by include's."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    out, seen = [], set()
    for e in entries:
        args = shlex.split(e["command"]) if "command" in e else list(e["arguments"])
        src = os.path.realpath(e["file"])
        if src in seen or src.startswith((os.path.join(ROOT, "tests") + os.sep, os.path.join(ROOT, "examples") + os.sep)):
            continue
        # The emulated CUDA library's translation units and the test ops (test infrastructure)
        # and the generated CPU kernels (runtime headers only, no torch) are not the library's
        # torch-facing code: minutes of -fsyntax-only for nothing.
        if "-DGNNFUSE_CUDA_EMULATED" in args or "/generated_test_ops/" in src or (src.endswith("_cpu.cpp") and "/generated" in src):
            continue
        # The CUDA adapters (CUDA mode, c10/cuda): the ctest cuda_adapters_compile compiles them
        # against the pinned torch; against torch 2.11 they are built on the GPU machine.
        if src.endswith("_cuda_register.cpp") or "/Unity/unity_cuda_adapters_" in src:  # (their unity groups)
            continue
        torch_inc = [a for a in args if a.endswith("/torch/include")]
        if not torch_inc:
            continue  # no torch: nothing to check
        old = torch_inc[0]
        new_args, skip = [], False
        for a in args:
            if skip:
                skip = False
                continue
            if a == "-o":
                skip = True
                continue
            if a == "-c":
                continue
            new_args.append(a.replace(old, include))
        new_args.append("-fsyntax-only")
        seen.add(src)
        out.append((src, e["directory"], new_args))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--version", default="2.11.0")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", default=None, help="where the headers go (default BUILD/tmp/torch-VERSION)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    dest = a.cache or os.path.join(build, "tmp", f"torch-{a.version}")
    t0 = time.time()
    try:
        fetch_headers(a.version, dest)
    except (OSError, RuntimeError) as ex:  # urllib's errors are OSErrors
        print(f"torch_headers_check: skipped: the headers of torch {a.version} could not be fetched ({ex})")
        return SKIP
    include = os.path.join(dest, "torch", "include")
    cmds = commands(build, include)
    if not cmds:
        print(f"torch_headers_check: no compile command with torch's headers in {build}/compile_commands.json")
        return 1

    def run(c):
        src, cwd, args = c
        r = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
        return src, r.returncode, r.stderr

    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for src, rc, err in pool.map(run, cmds):
            if rc != 0:
                errors = [l for l in err.splitlines() if "error" in l][:8]
                failed.append(src)
                print(f"FAILED {src}\n  " + "\n  ".join(errors))
    print(f"torch {a.version} headers: {len(cmds) - len(failed)} of {len(cmds)} translation units compile "
          f"({time.time() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
