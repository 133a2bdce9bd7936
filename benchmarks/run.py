"""``make bench``: every benchmark, each a ratio against a baseline measured in the same run.

Each area module (``benchmarks/<area>.py``) exposes ``run(quick: bool) -> list[dict]``;
a result has ``name``, ``value``, ``unit``, ``baseline``, ``ratio`` and, where it
helps, ``detail``. Results are printed as a table and written as JSON to
``bench-results/bench-<timestamp>.json`` (and ``bench-results/latest.json``).

    python -m benchmarks.run [--quick] [--only engine,data]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import platform
import sys
import time
import traceback
from pathlib import Path

AREAS = [
    "data",
    "registry",
    "plan",
    "engine",
    "dpo",
    "serving",
    "evals",
    "rl",
    "service",
    "ui",
    "minifield",
    "tinker",
]
OUT = Path("bench-results")


def _device() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"cuda:{torch.cuda.get_device_name(0)}"
    except Exception:
        pass
    return f"cpu ({platform.processor() or platform.machine()})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    ap.add_argument("--only", default="", help="comma-separated areas: " + ",".join(AREAS))
    args = ap.parse_args(argv)
    areas = [a for a in (args.only.split(",") if args.only else AREAS) if a]
    results: list[dict] = []
    failed: list[str] = []
    for area in areas:
        t0 = time.perf_counter()
        print(f"== {area} ==", flush=True)
        try:
            mod = importlib.import_module(f"benchmarks.{area}")
            rows = mod.run(quick=args.quick)
        except Exception:
            traceback.print_exc()
            failed.append(area)
            continue
        for r in rows:
            r.setdefault("area", area)
            results.append(r)
            ratio = r.get("ratio")
            rtxt = f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else "-"
            base = r.get("baseline")
            btxt = f"{base:.4g}" if isinstance(base, (int, float)) else str(base or "-")
            val = r.get("value")
            vtxt = f"{val:.4g}" if isinstance(val, (int, float)) else str(val)
            print(
                f"  {r['name']:<48} {vtxt:>12} {r.get('unit', ''):<10} baseline {btxt:>10}"
                f"  ratio {rtxt}",
                flush=True,
            )
        print(f"  ({time.perf_counter() - t0:.0f}s)", flush=True)
    OUT.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    doc = {
        "timestamp": stamp,
        "device": _device(),
        "python": sys.version.split()[0],
        "quick": args.quick,
        "results": results,
        "failed": failed,
    }
    for p in (OUT / f"bench-{stamp}.json", OUT / "latest.json"):
        p.write_text(json.dumps(doc, indent=2))
    print(f"wrote {OUT / f'bench-{stamp}.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
