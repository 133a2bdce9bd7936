"""``training adapters import NS/NAME --base BASE_MODEL -d DIR`` (F118, seeds/001 "Other
changes"): bring a PEFT adapter trained elsewhere into the registry.

The service checks the adapter against the base model before it registers anything
(:mod:`akka_optimize.registry.adapter_checks`: tensor names and shapes, target modules,
rank at most the serving engine's, no DoRA, ``modules_to_save``, ``lm_head`` or
embeddings); a refused import prints the reason and registers nothing. The import is
answered when it is done, with the registered version.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from .output import OutputOpt, emit
from .registry import AliasOpt, TimeoutOpt, _path, _ref, _show_version, _tar_dir, upload

app = typer.Typer(help="Adapters trained elsewhere: import a PEFT folder.", no_args_is_help=True)


@app.command("import")
def import_adapter(
    name: Annotated[str, typer.Argument(help="NS/NAME to register it under, e.g. triage/ext")],
    base: Annotated[
        str, typer.Option("--base", help="The base model it was trained on, e.g. Qwen/Qwen3-0.6B.")
    ],
    folder: Annotated[
        Path, typer.Option("-d", "--dir", help="The PEFT adapter folder (adapter_config.json).")
    ],
    alias: AliasOpt = None,
    timeout: TimeoutOpt = None,
    output: OutputOpt = "text",
) -> None:
    """Check a PEFT adapter folder against its base model and register it.

    Example: {prog} training adapters import triage/ext --base akka-optimize/tiny-smollm2 -d ./adapter
    """
    r = _ref(name, bare=True)
    params = {"base_model": base, "alias": alias}
    with tempfile.TemporaryDirectory() as tmp:
        archive = _tar_dir(folder, Path(tmp) / "adapter.tar.gz")
        out = upload(_path("model", r), archive, params, timeout)
    emit(out, output, _show_version)
