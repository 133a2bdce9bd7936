"""``registry`` commands: datasets, scoring bundles, models and images (seeds/001).

A thin client of the registry routes under ``/v1/registry``. Uploads stream from disk,
show progress for large files (a bar on a terminal, one line per 10 % otherwise, on
stderr), and fail after 60 s without progress or 10 min without an answer; ``--timeout``
sets one limit for the whole upload instead (seeds/001 "Other changes").

This module owns the command tree; uploads and downloads live in
:mod:`.registry_transfer`, packing local files in :mod:`.registry_packing`, text output
in :mod:`.registry_output`, and every name stays importable from here.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from ..client import Client, decode
from ..context import CliError, prog
from ..output import OutputOpt, emit, print_table
from .output import kv, show_list, show_versions
from .output import show_version as show_version
from .packing import prepared_zip
from .packing import tar_dir as tar_dir
from .packing import with_images as with_images
from .transfer import ANSWER_S, CHUNK, download_folder
from .transfer import registry_path as registry_path
from .transfer import registry_transfer_ref as registry_transfer_ref
from .transfer import upload as upload

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
TimeoutOpt = Annotated[
    float | None,
    typer.Option("--timeout", help="One limit in seconds for the whole upload."),
]
AliasOpt = Annotated[str | None, typer.Option("--alias", help="Point this alias at the version.")]


# -- read commands shared by every kind ---------------------------------------------------
VERSIONS_PAGE = 1000
"""Versions asked for per request (the service's largest page)."""


def all_versions(client: Client, path: str, page: int = VERSIONS_PAGE) -> dict[str, Any]:
    """Every version at ``path`` (``/v1/registry/KINDs/NS/NAME/versions``), oldest first,
    following the service's pages (``limit``/``after``, then ``nextAfter``) to the last.

    Returns:
        ``{"items": [version, ...], "nextAfter": None}``, the shape of one whole page.
    """
    items: list[dict[str, Any]] = []
    after = 0
    while True:
        doc = client.get(path, params={"limit": page, "after": after})
        items += doc["items"]
        if doc.get("nextAfter") is None:
            return {"items": items, "nextAfter": None}
        after = doc["nextAfter"]


def _add_read_commands(sub: typer.Typer, kind: str) -> None:
    @sub.command("list")
    def list_(
        namespace: Annotated[str | None, typer.Option("--namespace", help="Only this one.")] = None,
        output: OutputOpt = "text",
    ) -> None:
        """List named {kind}s with their latest version and aliases."""
        params = {"namespace": namespace} if namespace else None
        emit(Client("registry").get(f"/v1/registry/{kind}s", params=params), output, show_list)

    @sub.command("get")
    def get(ref: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:…]")],
            output: OutputOpt = "text") -> None:  # fmt: skip
        """Show one version; NS/NAME resolves through latest."""
        emit(
            Client("registry").get(registry_path(kind, registry_transfer_ref(ref))),
            output,
            show_version,
        )

    @sub.command("versions")
    def versions(ref: Annotated[str, typer.Argument(help="NS/NAME")],
                 output: OutputOpt = "text") -> None:  # fmt: skip
        """List every version of a named artifact."""
        path = registry_path(kind, registry_transfer_ref(ref, bare=True)) + "/versions"
        emit(all_versions(Client("registry"), path), output, show_versions)

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
        r = registry_transfer_ref(target)
        if not r.alias:
            raise CliError(f"Name the alias as NS/NAME:ALIAS, such as {r.repo}:champion.")
        path = f"/v1/registry/{kind}s/{r.namespace}/{r.name}/aliases/{r.alias}"
        emit(Client("registry").put(path, json={"version": version}), output, show_version)

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
        kv([("version", d["version"]), ("url", Client("registry").url), *limits])

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
    `python -m akka_optimize.data.prepared.rows`) registers prepared token rows, which a
    supervised run trains as given.

    Example: {prog} registry datasets register triage/train -f train.jsonl --alias candidate
    """
    r = registry_transfer_ref(name, bare=True)
    if not (file.is_file() or file.is_dir()):
        raise CliError(f"{file} is not a file or a folder.")
    with tempfile.TemporaryDirectory() as tmp:
        if file.is_dir():
            send = prepared_zip(file, Path(tmp))
            params = {"alias": alias, "filename": file.name + ".zip"}
        else:
            send = with_images(file, Path(tmp))
            params = {"alias": alias, "filename": file.name}
        out = upload(registry_path("dataset", r), send, params, timeout)
    emit(out, output, show_version)


@datasets_app.command("object")
def datasets_object(
    ref: Annotated[str, typer.Argument(help="NS/NAME[:vN|:ALIAS|@sha256:…]")],
    out: Annotated[Path | None, typer.Option("-o", "--output", help="Write to FILE.")] = None,
) -> None:
    """Write the bytes registered for a dataset version to stdout or FILE."""
    c = Client("registry")
    try:
        with httpx.stream("GET", c.url + registry_path("dataset", registry_transfer_ref(ref)) + "/object",
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
    r = registry_transfer_ref(name, bare=True)
    with tempfile.TemporaryDirectory() as tmp:
        archive = tar_dir(folder, Path(tmp) / "bundle.tar.gz")
        out = upload(registry_path("bundle", r), archive, {"alias": alias}, timeout)
    emit(out, output, show_version)


@models_app.command("register")
def models_register(
    name: Annotated[str, typer.Argument(help="NS/NAME, such as triage/qwen3-0.6b")],
    folder: Annotated[
        Path | None, typer.Option("-f", "--file", help="A PEFT adapter folder.")
    ] = None,
    base_model: Annotated[
        str | None,
        typer.Option("--base-model", help="The base model version, e.g. qwen/qwen3-0.6b:v1."),
    ] = None,
    from_: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="A Tinker checkpoint of project NS instead of a folder: "
            "tinker://MODEL_ID/sampler_weights/NAME or …/external_weights/NAME.",
        ),
    ] = None,
    alias: AliasOpt = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="The producing run.")] = None,
    parent_model: Annotated[
        str | None, typer.Option("--parent-model", help="The model an RL run started from.")
    ] = None,
    timeout: TimeoutOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Register an adapter folder (or, with --from, a Tinker checkpoint: its run gives the
    base model) as the next version of a named model."""
    r = registry_transfer_ref(name, bare=True)
    if from_:
        if folder or base_model or run_id or parent_model:
            raise CliError(
                "--from takes the adapter, base model and run from the Tinker checkpoint; "
                "leave out -f, --base-model, --run-id and --parent-model.",
                exit_code=2,
            )
        body = {"path": from_, "alias": alias}
        emit(
            Client("registry").post(registry_path("model", r) + "/from-tinker", json=body),
            output,
            show_version,
        )
        return
    if folder is None or not base_model:
        raise CliError("Give -f FOLDER and --base-model, or --from tinker://….", exit_code=2)
    params = {"base_model": base_model, "alias": alias, "run_id": run_id}
    params["parent_model"] = parent_model
    with tempfile.TemporaryDirectory() as tmp:
        archive = tar_dir(folder, Path(tmp) / "model.tar.gz")
        out = upload(registry_path("model", r), archive, params, timeout)
    emit(out, output, show_version)


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
    path = registry_path("model", registry_transfer_ref(ref)) + "/annotations"
    emit(Client("registry").put(path, json={"annotations": notes}), output, show_version)


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
    download_folder(ref, "object", out)


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
    download_folder(ref, "merged", out, timeout=600)
