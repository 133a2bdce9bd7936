"""Commands and flags that 0.8 removed, each answered with the command that replaced it.

seeds/001 "Breaking changes" (FEATURES.md, "Removed commands"): ``training workloads``
is ``training projects``; ``datasets create``/``name``/``images push`` are under
``registry``; ``training bundles push`` is ``registry bundles register``;
``trained-models`` is ``registry models …``; every ``--workload`` is ``--project``.
Instead of click's "No such command", the CLI names the replacement as the user would
type it (``{prog}`` is the command as it was run).
"""

from __future__ import annotations

REMOVED: list[tuple[tuple[str, ...], str]] = [
    (
        ("training", "workloads", "refs"),
        "`training workloads refs` was removed in 0.8: a training project holds no "
        "references; every run plan names its baseModel and config.dataset. List projects "
        "with `{prog} training projects list`.",
    ),
    (
        ("training", "workloads"),
        "`training workloads` is now `training projects` (0.8): use "
        "`{prog} training projects list`, `{prog} training projects create NAME` or "
        "`{prog} training projects get NAME`.",
    ),
    (
        ("training", "projects", "rename"),
        "`training projects rename` was removed in 0.8: a project's name cannot change. "
        "Create another with `{prog} training projects create NAME`.",
    ),
    (
        ("datasets", "create"),
        "`datasets create` was removed in 0.8: register a dataset with "
        "`{prog} registry datasets register NS/NAME -f FILE`.",
    ),
    (
        ("datasets", "name"),
        "`datasets name` was removed in 0.8: name a version with "
        "`{prog} registry datasets alias set NS/NAME:vN ALIAS`, or register with "
        "`{prog} registry datasets register NS/NAME -f FILE --alias ALIAS`.",
    ),
    (
        ("datasets", "images", "push"),
        "`datasets images push` was removed in 0.8: use `{prog} registry images push`.",
    ),
    (
        ("datasets",),
        "Dataset commands are under `registry datasets` in 0.8: use "
        "`{prog} registry datasets list` or `{prog} registry datasets register NS/NAME -f FILE`.",
    ),
    (
        ("training", "bundles", "push"),
        "`training bundles push` was removed in 0.8: use "
        "`{prog} registry bundles register NS/NAME -f DIR`.",
    ),
    (
        ("training", "trained-models"),
        "`trained-models` was removed in 0.8: use `{prog} registry models get REF`, "
        "`{prog} registry models versions NS/NAME`, `{prog} registry models register` or "
        "`{prog} registry models annotate`.",
    ),
    (
        ("trained-models",),
        "`trained-models` was removed in 0.8: use `{prog} registry models get REF`, "
        "`{prog} registry models versions NS/NAME`, `{prog} registry models register` or "
        "`{prog} registry models annotate`.",
    ),
]
"""(command words, the sentence naming the replacement) — longest match first."""


def removed_hint(args: list[str], prog: str) -> str | None:
    """The sentence for a removed command or flag in ``args``, or None.

    Args:
        args: the words after the root command (``akka optimize``'s ``optimize`` already
            dropped), e.g. ``["training", "workloads", "list"]``.
        prog: the command prefix as it was run (``akka-optimize``, ``akka optimize``,
            ``akka``), put in front of the replacement.
    """
    words = [a for a in args if not a.startswith("-")]
    for path, sentence in REMOVED:
        if tuple(words[: len(path)]) == path:
            return sentence.replace("{prog}", prog)
    for a in args:
        if a == "--workload" or a.startswith("--workload="):
            return "--workload was renamed --project in 0.8: give --project NAME instead."
    return None
