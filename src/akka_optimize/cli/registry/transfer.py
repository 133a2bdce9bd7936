"""Moving bytes to and from the registry routes for the ``registry`` commands: the route
a reference names, streamed uploads with progress (a bar on a terminal, one line per
10 % otherwise, on stderr) and time limits (60 s without progress, 10 min without an
answer, or one ``--timeout`` for the whole upload), and folder downloads.
"""

from __future__ import annotations

import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from ...refs import Ref, parse_ref
from ..client import Client, decode, retrying_503
from ..context import CliError, prog

STALL_S = 60.0
ANSWER_S = 600.0
PROGRESS_BYTES = 8 * 1024**2
CHUNK = 1 << 20


def registry_transfer_ref(text: str, *, bare: bool = False) -> Ref:
    try:
        r = parse_ref(text)
    except Exception as exc:  # InvalidRequest: print its sentence
        raise CliError(getattr(exc, "message", str(exc))) from exc
    if bare and (r.version is not None or r.alias or r.digest):
        raise CliError(f"Give NS/NAME without a version, alias or digest, not {text}.")
    return r


def registry_path(kind: str, r: Ref) -> str:
    sel = f":v{r.version}" if r.version is not None else (f":{r.alias}" if r.alias else "")
    if r.digest:
        sel += f"@{r.digest}"
    return f"/v1/registry/{kind}s/{r.namespace}/{r.name}{sel}"


def _progress_chunks(path: Path, label: str) -> Iterator[bytes]:
    total = path.stat().st_size
    show = total >= PROGRESS_BYTES
    sent, next_mark, start = 0, 10, time.monotonic()
    tty = sys.stderr.isatty()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sent += len(chunk)
            yield chunk
            if not show:
                continue
            pct = sent * 100 // total
            rate = sent / max(time.monotonic() - start, 1e-6) / 1024**2
            if tty:
                sys.stderr.write(f"\rUploading {label}: {pct:3d}% ({rate:.1f} MiB/s)")
                sys.stderr.flush()
            elif pct >= next_mark:
                print(f"Uploading {label}: {pct}% ({rate:.1f} MiB/s)", file=sys.stderr, flush=True)
                next_mark = pct // 10 * 10 + 10
    if show and tty:
        sys.stderr.write("\n")


def upload(path_: str, file: Path, params: dict[str, Any], timeout: float | None) -> Any:
    """POST ``file`` streamed to ``path_``; return the decoded answer.

    Without ``timeout``: fails after :data:`STALL_S` s without progress (connect, each
    write, each read) or :data:`ANSWER_S` s waiting for the answer. With it: one limit for
    the whole upload.
    """
    c = Client("registry")
    if timeout is None:
        limits = httpx.Timeout(connect=STALL_S, write=STALL_S, read=ANSWER_S, pool=STALL_S)
    else:
        limits = httpx.Timeout(timeout)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            r = retrying_503(
                lambda: httpx.post(
                    c.url + path_,
                    params={k: v for k, v in params.items() if v is not None},
                    content=_progress_chunks(file, file.name),
                    headers={
                        **c.headers(),
                        "Content-Type": "application/octet-stream",
                        "Content-Length": str(file.stat().st_size),
                    },
                    timeout=limits,
                )
            )
            box["answer"] = decode(r)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise CliError(f"The upload of {file} did not finish within --timeout {timeout:g} s.")
    err = box.get("error")
    if isinstance(err, httpx.ConnectError):
        raise CliError(
            f"Cannot reach the registry at {c.url}. Start it with `{prog()} server start`, "
            "or set AKKA_OPTIMIZE_URL."
        )
    if isinstance(err, httpx.WriteTimeout):
        raise CliError(f"The upload of {file} made no progress for {STALL_S:.0f} s; gave up.")
    if isinstance(err, httpx.TimeoutException):
        raise CliError(f"The registry did not answer the upload of {file} in time ({err}).")
    if err is not None:
        raise err
    return box["answer"]


def download_folder(ref: str, route: str, out: Path, timeout: float | None = None) -> None:
    """GET ``…/models/NS/NAME[:SEL]/{route}`` (a tar) and unpack it into ``out`` (new or
    empty)."""
    import io

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CliError(f"{out} is not an empty folder; give a new or empty one.", exit_code=2)
    c = Client("registry")
    try:
        resp = retrying_503(
            lambda: httpx.get(
                c.url + registry_path("model", registry_transfer_ref(ref)) + f"/{route}",
                headers=c.headers(),
                timeout=timeout or ANSWER_S,
            )
        )
    except httpx.ConnectError as exc:
        raise CliError(f"Cannot reach the registry at {c.url}.") from exc
    if resp.status_code >= 400:
        decode(resp)
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(resp.content), mode="r") as tf:
        tf.extractall(out, filter="data")
    names = sorted(p.name for p in out.iterdir())
    print(f"Wrote {resp.headers.get('X-Akka-Ref', ref)} to {out}: {', '.join(names)}.")
