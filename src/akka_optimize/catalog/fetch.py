"""The fetch subprocess: brings one catalog entry's weights into the weights cache.

The service never fetches or converts in its own process (a GGUF conversion holds
about 1 GB and most of a CPU for tens of seconds): a background thread of the
service runs ``python -m akka_optimize.catalog.fetch REPOSITORY --weights-dir DIR
[--deployment FILE]`` and reads its standard output, one JSON object per line:

- ``{"progress": "<line>"}`` for each step (shown by ``select --wait``);
- last, ``{"path": "<model dir>", "commit": "<commit>"}`` on success (exit 0), or
  ``{"error": "<one sentence>"}`` on failure (exit 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..deployment import load_deployment
from ..errors import AkkaError
from .entries import load_catalog
from .sources import FetchError, materialize


def _emit(obj: dict[str, str]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def run(repository: str, weights_dir: Path, deployment: Path | None) -> int:
    """Fetch ``repository`` into ``weights_dir``; print the protocol above. Returns the exit
    status (0 on success, 1 with an ``error`` line on failure)."""

    try:
        catalog = load_catalog(load_deployment(deployment))
        entry = catalog.require(repository)
        path, commit = materialize(
            entry, catalog, weights_dir, lambda line: _emit({"progress": line})
        )
    except FetchError as exc:
        _emit({"error": str(exc)})
        return 1
    except AkkaError as exc:
        _emit({"error": exc.message})
        return 1
    except Exception as exc:  # anything else still ends in one sentence
        text = " ".join(str(exc).split()).rstrip(".")
        _emit({"error": f"Fetching {repository} failed: {type(exc).__name__}: {text}."})
        return 1
    _emit({"path": str(path), "commit": commit})
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m akka_optimize.catalog.fetch")
    ap.add_argument("repository")
    ap.add_argument("--weights-dir", required=True, type=Path)
    ap.add_argument("--deployment", type=Path, default=None)
    a = ap.parse_args(argv)
    return run(a.repository, a.weights_dir, a.deployment)


if __name__ == "__main__":
    sys.exit(main())
