"""``registry`` commands: datasets, scoring bundles, models and images (seeds/001).

A thin client of the registry routes under ``/v1/registry``. Uploads stream from disk,
show progress for large files (a bar on a terminal, one line per 10 % otherwise, on
stderr), and fail after 60 s without progress or 10 min without an answer; ``--timeout``
sets one limit for the whole upload instead (seeds/001 "Other changes").
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from ..refs import Ref, parse_ref
from .client import Client, decode, retrying_503
from .context import CliError, prog
from .output import OutputOpt, emit, print_table

app = typer.Typer(
    help="The artifact registry: datasets, scoring bundles, models and images.\n\n"
    "Example: {prog} registry datasets register triage/train -f train.jsonl",
    no_args_is_help=True,
)
datasets_app = typer.Typer(help="Versioned datasets (JSONL, or ZIP of JSONL plus images).")
bundles_app = typer.Typer(help="Versioned scoring bundles (a folder of grader files).")
models_app = typer.Typer(help="Versioned models: base models and trained adapters.")
images_app = typer.Typer(help="Images referenced by dataset examples.")
app.add_typer(datasets_app, name="datasets", no_args_is_help=True)
app.add_typer(bundles_app, name="bundles", no_args_is_help=True)
app.add_typer(models_app, name="models", no_args_is_help=True)
app.add_typer(images_app, name="images", no_args_is_help=True)

STALL_S = 60.0
ANSWER_S = 600.0
PROGRESS_BYTES = 8 * 1024**2
CHUNK = 1 << 20
TimeoutOpt = Annotated[
    float | None,
    typer.Option("--timeout", help="One limit in seconds for the whole upload."),
]
AliasOpt = Annotated[str | None, typer.Option("--alias", help="Point this alias at the version.")]


def _ref(text: str, *, bare: bool = False) -> Ref:
    try:
        r = parse_ref(text)
    except Exception as exc:  # InvalidRequest: print its sentence
        raise CliError(getattr(exc, "message", str(exc))) from exc
    if bare and (r.version is not None or r.alias or r.digest):
        raise CliError(f"Give NS/NAME without a version, alias or digest, not {text}.")
    return r


def _path(kind: str, r: Ref) -> str:
    sel = f":v{r.version}" if r.version is not None else (f":{r.alias}" if r.alias else "")
    if r.digest:
        sel += f"@{r.digest}"
    return f"/v1/registry/{kind}s/{r.namespace}/{r.name}{sel}"


# -- uploads ----------------------------------------------------------------------------
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


def _tar_dir(folder: Path, dest: Path) -> Path:
    if not folder.is_dir():
        raise CliError(f"{folder} is not a folder.")
    with tarfile.open(dest, "w:gz") as tf:
        for p in sorted(folder.rglob("*")):
            if p.is_symlink():
                raise CliError(f"{p} is a symbolic link; a bundle may hold only regular files.")
            if p.is_file():
                tf.add(p, arcname=p.relative_to(folder).as_posix(), recursive=False)
    return dest


def _image_paths(file: Path) -> list[str]:
    """Local image paths named by examples of a JSONL file (see registry.datasets)."""
    found: list[str] = []

    def walk(o: Any) -> None:
        if isinstance(o, list):
            for x in o:
                walk(x)
        elif isinstance(o, dict):
            val = None
            if o.get("type") == "image":
                val = o.get("image")
            elif o.get("type") == "image_url" and isinstance(o.get("image_url"), dict):
                val = o["image_url"].get("url")
            if isinstance(val, str) and not val.startswith(("http:", "https:", "data:", "sha256:")):
                found.append(val)
            for v in o.values():
                walk(v)

    with open(file, "rb") as f:
        for line in f:
            if b'"image' in line:
                try:
                    walk(json.loads(line))
                except ValueError:
                    continue  # the registry reports bad lines with their numbers
    return found


def _with_images(file: Path, tmp: Path) -> Path:
    """``file`` itself, or a ZIP of it plus the local images its examples name."""
    if zipfile.is_zipfile(file):
        return file
    paths = _image_paths(file)
    if not paths:
        return file
    out = tmp / (file.stem + ".zip")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        zf.write(file, arcname=file.name)
        for rel in sorted(set(paths)):
            src = (file.parent / rel).resolve()
            if not src.is_file():
                raise CliError(f"{file}: an example names the image {rel}, which does not exist.")
            zf.write(src, arcname=rel.removeprefix("./"))
    return out


def _prepared_zip(folder: Path, tmp: Path) -> Path:
    """A folder of prepared token rows as a ZIP: ``prepared.json`` and the files it lists
    (stored, not compressed again: Parquet is compressed)."""
    desc = folder / "prepared.json"
    if not desc.is_file():
        raise CliError(
            f"{folder} is a folder without prepared.json; give a JSONL file, a ZIP, or a "
            "folder written by `python -m akka_optimize.data.prepared`."
        )
    try:
        names = json.loads(desc.read_text()).get("files")
    except (ValueError, AttributeError) as exc:
        raise CliError(f"{desc} is not a JSON object: {exc}") from exc
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CliError(f"{desc}: files must list the Parquet files of the rows.")
    out = tmp / (folder.name + ".zip")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        zf.write(desc, "prepared.json")
        for n in names:
            p = folder / n
            if not p.is_file():
                raise CliError(f"{desc} names {n}, which is not a file in {folder}.")
            zf.write(p, n)
    return out


def _kv(pairs: list[tuple[str, Any]]) -> None:
    """``key  value`` lines, never wrapped (references and digests must stay copyable)."""
    w = max((len(k) for k, _ in pairs), default=0)
    for k, v in pairs:
        print(f"{k.ljust(w)}  {'' if v is None else v}")


def _show_version(d: dict[str, Any], wide: bool) -> None:
    pairs = [
        ("ref", d.get("ref")),
        ("name", d.get("name")),
        ("version", d.get("version")),
        ("digest", d.get("digest")),
        ("aliases", ", ".join(d.get("aliases") or []) or None),
        ("size", d.get("size")),
        ("created", d.get("createdAt")),
    ]
    if d.get("baseModel") or d.get("source") == "adapter":
        pairs += [
            ("base model", d.get("baseModel")),
            ("parent model", d.get("parentModel")),
            ("run", d.get("runId")),
        ]
    meta = d.get("metadata") or {}
    for k in ("rows", "files", "format", "repository", "commit"):
        if meta.get(k) is not None:
            pairs.append((k, meta[k]))
    if meta.get("annotations"):
        pairs.append(("annotations", json.dumps(meta["annotations"], sort_keys=True)))
    if "created" in d and d.get("created") is not None:
        pairs.insert(0, ("registered", "new version" if d["created"] else "existing version"))
    if wide:
        pairs.append(("metadata", json.dumps(meta, sort_keys=True)))
    _kv(pairs)


def _show_versions(d: dict[str, Any], wide: bool) -> None:
    cols = [("VERSION", "version"), ("DIGEST", "digest"), ("ALIASES", "aliasText")]
    cols += [("CREATED", "createdAt")] + ([("REF", "ref")] if wide else [])
    rows = [{**v, "aliasText": ", ".join(v.get("aliases") or [])} for v in d["items"]]
    print_table(rows, cols)


def _show_list(d: dict[str, Any], wide: bool) -> None:
    rows = [
        {**v, "aliasText": ", ".join(f"{a}→{x}" for a, x in (v.get("aliases") or {}).items())}
        for v in d["items"]
    ]
    cols = [("NAME", "name"), ("LATEST", "latest"), ("ALIASES", "aliasText")]
    print_table(rows, cols + ([("DIGEST", "digest")] if wide else []))


# -- read commands shared by every kind ---------------------------------------------------
def _add_read_commands(sub: typer.Typer, kind: str) -> None:
    @sub.command("list")
    def list_(
        namespace: Annotated[str | None, typer.Option("--namespace", help="Only this one.")] = None,
        output: OutputOpt = "text",
    ) -> None:
        """List named {kind}s with their latest version and aliases."""
        params = {"namespace": namespace} if namespace else None
        emit(Client("registry").get(f"/v1/registry/{kind}s", params=params), output, _show_list)

    @sub.command("get")
    def get(ref: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:…]")],
            output: OutputOpt = "text") -> None:  # fmt: skip
        """Show one version; NS/NAME resolves through latest."""
        emit(Client("registry").get(_path(kind, _ref(ref))), output, _show_version)

    @sub.command("versions")
    def versions(ref: Annotated[str, typer.Argument(help="NS/NAME")],
                 output: OutputOpt = "text") -> None:  # fmt: skip
        """List every version of a named artifact."""
        path = _path(kind, _ref(ref, bare=True)) + "/versions"
        emit(Client("registry").get(path), output, _show_versions)

    alias_app = typer.Typer(help="Aliases such as candidate and champion.", no_args_is_help=True)
    sub.add_typer(alias_app, name="alias")

    @alias_app.command("set")
    def alias_set(
        target: Annotated[str, typer.Argument(help="NS/NAME:ALIAS")],
        version: Annotated[str, typer.Option("--version", help="The version, such as v3.")],
        output: OutputOpt = "text",
    ) -> None:
        """Point an alias at a version, e.g. {prog} registry models alias set
        triage/qwen3-0.6b:champion --version v3."""
        r = _ref(target)
        if not r.alias:
            raise CliError(f"Name the alias as NS/NAME:ALIAS, such as {r.repo}:champion.")
        path = f"/v1/registry/{kind}s/{r.namespace}/{r.name}/aliases/{r.alias}"
        emit(Client("registry").put(path, json={"version": version}), output, _show_version)

    for cmd in (list_, get, versions):
        cmd.__doc__ = (cmd.__doc__ or "").replace("{kind}", kind)


_add_read_commands(datasets_app, "dataset")
_add_read_commands(bundles_app, "bundle")
_add_read_commands(models_app, "model")


@app.command("info")
def info(output: OutputOpt = "text") -> None:
    """Show the registry's build version and upload limits."""

    def text(d: dict[str, Any], _wide: bool) -> None:
        limits = [(f"limits.{k}", v) for k, v in d.get("limits", {}).items()]
        _kv([("version", d["version"]), ("url", Client("registry").url), *limits])

    emit(Client("registry").get("/v1/registry/info"), output, text)


@datasets_app.command("register")
def datasets_register(
    name: Annotated[str, typer.Argument(help="NS/NAME, such as triage/train")],
    file: Annotated[
        Path,
        typer.Option(
            "-f", "--file", help="A JSONL file, a ZIP, or a folder of prepared token rows."
        ),
    ],
    alias: AliasOpt = None,
    timeout: TimeoutOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Register a dataset version; the same examples return the existing version.

    A folder holding prepared.json and its Parquet token rows (written by
    `python -m akka_optimize.data.prepared`) registers prepared token rows, which a
    supervised run trains as given.

    Example: {prog} registry datasets register triage/train -f train.jsonl --alias candidate
    """
    r = _ref(name, bare=True)
    if not (file.is_file() or file.is_dir()):
        raise CliError(f"{file} is not a file or a folder.")
    with tempfile.TemporaryDirectory() as tmp:
        if file.is_dir():
            send = _prepared_zip(file, Path(tmp))
            params = {"alias": alias, "filename": file.name + ".zip"}
        else:
            send = _with_images(file, Path(tmp))
            params = {"alias": alias, "filename": file.name}
        out = upload(_path("dataset", r), send, params, timeout)
    emit(out, output, _show_version)


@datasets_app.command("object")
def datasets_object(
    ref: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:…]")],
    out: Annotated[Path | None, typer.Option("-o", "--output", help="Write to FILE.")] = None,
) -> None:
    """Write the bytes registered for a dataset version to stdout or FILE."""
    c = Client("registry")
    try:
        with httpx.stream("GET", c.url + _path("dataset", _ref(ref)) + "/object",
                          headers=c.headers(), timeout=ANSWER_S) as resp:  # fmt: skip
            if resp.status_code >= 400:
                resp.read()
                decode(resp)
            sink = open(out, "wb") if out else sys.stdout.buffer
            try:
                for chunk in resp.iter_bytes(CHUNK):
                    sink.write(chunk)
            finally:
                if out:
                    sink.close()
                else:
                    sink.flush()
    except httpx.ConnectError as exc:
        raise CliError(f"Cannot reach the registry at {c.url}.") from exc
    if out:
        print(f"Wrote {out} ({out.stat().st_size:,} bytes).", file=sys.stderr)


@bundles_app.command("register")
def bundles_register(
    name: Annotated[str, typer.Argument(help="NS/NAME, such as gsm8k/scoring")],
    folder: Annotated[Path, typer.Option("-f", "--file", help="The bundle folder.")],
    alias: AliasOpt = None,
    timeout: TimeoutOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Register a scoring bundle; the same files return the existing version.

    Example: {prog} registry bundles register gsm8k/scoring -f scoring/
    """
    r = _ref(name, bare=True)
    with tempfile.TemporaryDirectory() as tmp:
        archive = _tar_dir(folder, Path(tmp) / "bundle.tar.gz")
        out = upload(_path("bundle", r), archive, {"alias": alias}, timeout)
    emit(out, output, _show_version)


@models_app.command("register")
def models_register(
    name: Annotated[str, typer.Argument(help="NS/NAME, such as triage/qwen3-0.6b")],
    folder: Annotated[Path, typer.Option("-f", "--file", help="A PEFT adapter folder.")],
    base_model: Annotated[
        str, typer.Option("--base-model", help="The base model version, e.g. qwen/qwen3-0.6b:v1.")
    ],
    alias: AliasOpt = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="The producing run.")] = None,
    parent_model: Annotated[
        str | None, typer.Option("--parent-model", help="The model an RL run started from.")
    ] = None,
    timeout: TimeoutOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Register an adapter folder as the next version of a named model."""
    r = _ref(name, bare=True)
    params = {"base_model": base_model, "alias": alias, "run_id": run_id}
    params["parent_model"] = parent_model
    with tempfile.TemporaryDirectory() as tmp:
        archive = _tar_dir(folder, Path(tmp) / "model.tar.gz")
        out = upload(_path("model", r), archive, params, timeout)
    emit(out, output, _show_version)


@models_app.command("annotate")
def models_annotate(
    ref: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:…]")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="KEY=VALUE (VALUE may be JSON).")
    ] = None,
    remove: Annotated[list[str] | None, typer.Option("--remove", help="KEY to remove.")] = None,
    output: OutputOpt = "text",
) -> None:
    """Set or remove annotations on a model version; `get` shows them."""
    notes: dict[str, Any] = {}
    for item in set_ or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--set takes KEY=VALUE, not {item!r}.", exit_code=2)
        try:
            notes[key] = json.loads(value)
        except ValueError:
            notes[key] = value
    for key in remove or []:
        notes[key] = None
    if not notes:
        raise CliError("Give at least one --set KEY=VALUE or --remove KEY.", exit_code=2)
    path = _path("model", _ref(ref)) + "/annotations"
    emit(Client("registry").put(path, json={"annotations": notes}), output, _show_version)


@images_app.command("push")
def images_push(
    paths: Annotated[list[Path], typer.Argument(help="Image files.")],
    timeout: TimeoutOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Upload images; examples can name them by the printed sha256 digest."""
    results = []
    for p in paths:
        if not p.is_file():
            raise CliError(f"{p} is not a file.")
        results.append(upload("/v1/registry/images", p, {"filename": p.name}, timeout))

    def text(items: list[dict[str, Any]], _wide: bool) -> None:
        print_table(items, [("FILE", "filename"), ("DIGEST", "digest"), ("SIZE", "size")])

    emit(results, output, text)


def _download_folder(ref: str, route: str, out: Path, timeout: float | None = None) -> None:
    """GET ``…/models/NS/NAME[:SEL]/{route}`` (a tar) and unpack it into ``out`` (new or
    empty)."""
    import io

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CliError(f"{out} is not an empty folder; give a new or empty one.", exit_code=2)
    c = Client("registry")
    try:
        resp = retrying_503(
            lambda: httpx.get(
                c.url + _path("model", _ref(ref)) + f"/{route}",
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


@models_app.command("object")
def models_object(
    ref: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:…]")],
    out: Annotated[
        Path, typer.Option("-o", "--output", help="The folder to write the adapter to.")
    ],
) -> None:
    """Write a model version as a PEFT adapter folder (`PeftModel.from_pretrained` loads it).

    Example: {prog} registry models object triage/tiny:v1 -o ./adapter
    """
    _download_folder(ref, "object", out)


@models_app.command("export")
def models_export(
    ref: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:…]")],
    out: Annotated[Path, typer.Option("-o", "--output", help="The folder to write.")],
    merged: Annotated[
        bool, typer.Option("--merged", help="Merge the adapter into its base model.")
    ] = False,
) -> None:
    """Write the base model with the version's adapter merged, as a transformers folder
    (fp32 merge, saved in the base model's dtype; its base model must be selected).

    Example: {prog} registry models export triage/tiny:v1 --merged -o ./merged
    """
    if not merged:
        raise CliError(
            f"export writes merged weights: give --merged, or use `{prog()} registry models "
            "object REF -o DIR` for the adapter folder.",
            exit_code=2,
        )
    _download_folder(ref, "merged", out, timeout=600)
