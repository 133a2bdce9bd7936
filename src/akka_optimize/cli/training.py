"""``training`` group: ``training info`` and the sub-groups added in main.py."""

from __future__ import annotations

import typer

from .client import Client
from .context import CliError, prog
from .output import OutputOpt, emit, print_kv, print_table

app = typer.Typer(help="Training: runs, projects, base models, endpoints.", no_args_is_help=True)


@app.command("info")
def info(output: OutputOpt = "text") -> None:
    """Show the trainer's build, stores and whether it started completely.

    Exits non-zero until the service has started completely.

    Example: {prog} training info -o json
    """
    data = Client("trainer").get("/v1/training/info")

    def text(d: dict, wide: bool) -> None:
        print_kv(
            [
                ("Version", d["version"]),
                ("State store", d["stateStore"]["url"] or d["stateStore"]["kind"]),
                ("Blob store", d["blobStore"]["url"] or "(shown to an admin token)"),
                ("Started completely", "yes" if d["startedCompletely"] else "no"),
            ]
            + ([("Start-up error", d["startupError"])] if d.get("startupError") else [])
        )

    emit(data, output, text)
    if not data.get("startedCompletely"):
        raise CliError(
            data.get("startupError")
            or f"The service has not started completely yet; run `{prog()} training info` again.",
        )


@app.command("capacity")
def capacity(
    project: str | None = typer.Option(
        None, "--project", help="Only this project's claims, usage and quota."
    ),
    output: OutputOpt = "text",
) -> None:
    """Show each device pool's declared and observed devices, and under Training projects
    every run, evaluation or endpoint holding or waiting for devices (with its queue
    position and reason) and each project's usage against its quota.

    Example: {prog} training capacity --project gsm8k
    """

    data = Client("trainer").get(
        "/v1/training/capacity", params={"project": project} if project else None
    )

    def devices(d: dict[str, int]) -> str:
        return ", ".join(f"{n} {pool}" for pool, n in d.items()) or "none"

    def text(d: dict, wide: bool) -> None:
        print("Pools")
        print_table(
            [
                {
                    **p,
                    "devices": f"{p['nodes']} x {p['devicesPerNode']}",
                    "use": f"{p['inUse']} of {p['declared']}",
                }
                for p in d["pools"]
            ],
            [
                ("POOL", "name"),
                ("PROFILE", "deviceProfile"),
                ("NODES x DEVICES", "devices"),
                ("DECLARED", "declared"),
                ("OBSERVED", "observed"),
                ("IN USE", "use"),
                ("WAITING", "waiting"),
            ],
        )
        claim = d["endpointClaim"]
        print(f"Each endpoint claims {claim['devices']} {claim['pool']} device(s).")
        print()
        print("Training projects")
        for p in d["projects"]:
            quota = ", ".join(
                f"{p['usage'].get(pool, 0)} of {n} {pool}" for pool, n in p["quota"].items()
            )
            used = devices({k: v for k, v in p["usage"].items() if v})
            print(f"  {p['projectName']}: using {used}; quota {quota or 'none (the pools)'}")
            for h in p["holding"]:
                print(
                    f"    holding  {h['kind']} {h['id']} ({h['method']}, {h['state']}): "
                    f"{devices(h['devices'])}"
                )
            for w in p["waiting"]:
                print(
                    f"    waiting  {w['kind']} {w['id']} ({w['method']}): "
                    f"{devices(w['devices'])}; position {w['position']} of {w['of']} in "
                    f"pool {w['pool']}: {w['reason']}"
                )
            if not p["holding"] and not p["waiting"]:
                print("    nothing holding or waiting")

    emit(data, output, text)
