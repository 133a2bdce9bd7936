"""Packing local files for a registry upload: a bundle or adapter folder as a tar, a
JSONL file with the local images its examples name as a ZIP, and a folder of prepared
token rows as a ZIP.
"""

from __future__ import annotations

import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from ..context import CliError


def tar_dir(folder: Path, dest: Path) -> Path:
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


def with_images(file: Path, tmp: Path) -> Path:
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


def prepared_zip(folder: Path, tmp: Path) -> Path:
    """A folder of prepared token rows as a ZIP: ``prepared.json`` and the files it lists
    (stored, not compressed again: Parquet is compressed)."""
    desc = folder / "prepared.json"
    if not desc.is_file():
        raise CliError(
            f"{folder} is a folder without prepared.json; give a JSONL file, a ZIP, or a "
            "folder written by `python -m akka_optimize.data.prepared.rows`."
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
