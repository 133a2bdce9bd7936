"""``training endpoints`` commands (seeds/000 "Endpoints reachable from your machine";
FEATURES F110–F120): create, wait, get, list, delete, info, send, proxy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .client import Client
from .context import CliError, prog
from .output import OutputOpt, console, emit, print_kv, print_table, wait_for

app = typer.Typer(
    help="Serve a base model or a trained adapter behind an OpenAI-compatible API.\n\n"
    "Example: {prog} training endpoints create --model triage/qwen3-0.6b:candidate --wait",
    no_args_is_help=True,
)
BASE = "/v1/training/endpoints"


def _line(ep: dict[str, Any]) -> str:
    act = ep.get("activity") or ""
    if ep["state"] == "FAILED":
        act = ep.get("error") or act
    return f"{ep['id'][:8]} {ep['state']}" + (f": {act}" if act and act != "ready" else "")


def _wait(client: Client, endpoint_id: str, timeout: float | None) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def poll() -> tuple[bool, str]:
        last.update(client.get(f"{BASE}/{endpoint_id}"))
        if last["state"] == "FAILED":
            raise CliError(f"Endpoint {last['id']} failed: {last.get('error')}")
        return last["state"] == "READY", _line(last)

    wait_for(poll, interval=0.5, timeout=timeout)
    return last


def _show(ep: dict[str, Any], wide: bool) -> None:
    pairs: list[tuple[str, Any]] = [
        ("ID", ep["id"]),
        ("Project", ep.get("projectName")),
        ("State", ep["state"]),
        ("Activity", ep.get("activity")),
        ("Base model", ep.get("baseModel")),
        ("Models", ", ".join(m["model"] for m in ep.get("models", []))),
        ("Instructions", ep.get("instructions") or "(none)"),
        ("OpenAI base URL", ep.get("openaiBaseUrl")),
    ]
    if ep.get("error"):
        pairs.append(("Error", ep["error"]))
    for name, chk in (ep.get("checks") or {}).items():
        if chk:
            text = chk["state"] + ("; " + " ".join(chk["findings"]) if chk.get("findings") else "")
            pairs.append((f"Check {name}", text))
    if wide:
        pairs.append(("Engine", ep.get("engine")))
        pairs.append(("Created", ep.get("createdAt")))
    print_kv(pairs)


@app.command("create")
def create(
    model: Annotated[str, typer.Option("--model", help="Registry reference of the model.")],
    project: Annotated[str | None, typer.Option("--project", help="Project (base models).")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the start until it answers.")
    ] = False,
    output: OutputOpt = "text",
) -> None:
    """Create an endpoint for a base model or a trained adapter.

    Example: {prog} training endpoints create --model triage/qwen3-0.6b:candidate --wait
    """
    c = Client()
    body: dict[str, Any] = {"model": model}
    if project:
        body["project"] = project
    ep = c.post(BASE, json=body)
    if output == "text":
        console.print(f"Created endpoint {ep['id']} for {model}.", highlight=False)
    if wait:
        ep = _wait(c, ep["id"], None)
    emit(ep, output, _show)


@app.command("wait")
def wait_cmd(
    endpoint: Annotated[str, typer.Argument(help="Endpoint ID or prefix.")],
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds.")] = None,
    output: OutputOpt = "text",
) -> None:
    """Wait until an endpoint answers, showing its queue position and activity."""
    emit(_wait(Client(), endpoint, timeout), output, _show)


@app.command("get")
def get(endpoint: Annotated[str, typer.Argument()], output: OutputOpt = "text") -> None:
    """Show an endpoint, with its models, instructions and post-deploy checks."""
    emit(Client().get(f"{BASE}/{endpoint}"), output, _show)


@app.command("list")
def list_cmd(
    project: Annotated[str | None, typer.Option("--project")] = None, output: OutputOpt = "text"
) -> None:
    """List endpoints (text output names the project)."""
    data = Client().get(BASE, params={"project": project} if project else None)

    def text(d: dict[str, Any], wide: bool) -> None:
        rows = [
            {
                **e,
                "id": e["id"] if wide else e["id"][:8],
                "model": ", ".join(m["model"] for m in e["models"]),
            }
            for e in d["endpoints"]
        ]
        print_table(
            rows, [("ID", "id"), ("PROJECT", "projectName"), ("STATE", "state"), ("MODEL", "model")]
        )

    emit(data, output, text)


@app.command("delete")
def delete(endpoint: Annotated[str, typer.Argument()], output: OutputOpt = "text") -> None:
    """Delete an endpoint."""
    ep = Client().delete(f"{BASE}/{endpoint}")
    emit(ep, output, lambda d, _w: console.print(f"Deleted endpoint {d['id']}.", highlight=False))


@app.command("info")
def info(output: OutputOpt = "text") -> None:
    """What an endpoint of this deployment can serve."""

    def text(d: dict[str, Any], _wide: bool) -> None:
        print_kv(
            [
                ("Engine", d["engine"]),
                ("Largest adapter rank", d["maxLoraRank"]),
                ("Adapters loaded at once", d["maxAdaptersLoaded"]),
                ("Reserved devices", f"{d['reservedDevices']} ({d['deviceType']})"),
                ("Longest context", f"{d['maxContextTokens']} tokens"),
                ("Idle time before stopping", f"{d['idleSeconds']}s"),
                (
                    "Adapters merged while served",
                    "yes" if d.get("mergeAdapters") else "no",
                ),
            ]
        )
        console.print("Parsers per architecture:", highlight=False)
        for arch, p in d["parsers"].items():
            console.print(
                f"  {arch}: tool calls {p['toolCalls'] or 'none'}, reasoning "
                f"{p['reasoning'] or 'none'}",
                highlight=False,
                markup=False,
            )

    emit(Client().get(f"{BASE}/info"), output, text)


@app.command("send")
def send(
    endpoint: Annotated[str, typer.Argument()],
    input: Annotated[str, typer.Option("--input", help="The user message.")],
    instructions: Annotated[str | None, typer.Option("--instructions")] = None,
    tools: Annotated[Path | None, typer.Option("--tools", help="JSON file of tools.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens")] = 256,
    temperature: Annotated[float, typer.Option("--temperature")] = 0.0,
    output: OutputOpt = "text",
) -> None:
    """Send one input and print the answer (and any tool calls and reasoning)."""
    c = Client(timeout=900)
    ep = c.get(f"{BASE}/{endpoint}")
    msgs = [{"role": "user", "content": input}]
    if instructions is not None:
        msgs.insert(0, {"role": "system", "content": instructions})
    body: dict[str, Any] = {
        "model": ep["models"][0]["model"],
        "messages": msgs,
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    if tools is not None:
        try:
            loaded = json.loads(tools.read_text())
        except (OSError, ValueError) as exc:
            raise CliError(f"--tools {tools}: not a readable JSON file ({exc}).") from exc
        body["tools"] = loaded.get("tools", loaded) if isinstance(loaded, dict) else loaded
    r = c.post(f"{BASE}/{ep['id']}/openai/v1/chat/completions", json=body)

    def text(d: dict[str, Any], _w: bool) -> None:
        msg = d["choices"][0]["message"]
        if msg.get("reasoning_content"):
            console.print(f"Reasoning: {msg['reasoning_content']}", highlight=False, markup=False)
        for call in msg.get("tool_calls") or []:
            f = call["function"]
            console.print(
                f"Tool call: {f['name']}({f['arguments']})", highlight=False, markup=False
            )
        if msg.get("content"):
            console.print(msg["content"], highlight=False, markup=False)

    emit(r, output, text)


@app.command("proxy")
def proxy(
    endpoint: Annotated[str, typer.Argument()],
    port: Annotated[int, typer.Option("--port", help="Local port to listen on.")] = 8800,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
) -> None:
    """Open a local OpenAI-compatible address forwarding to the endpoint with your token.

    Example: {prog} training endpoints proxy 970076e8 --port 8800, then
    OpenAI(base_url="http://localhost:8800/v1", api_key="unused").
    """
    import uvicorn

    from ..serving.proxy import build_proxy_app  # lazy: starlette

    c = Client()
    ep = c.get(f"{BASE}/{endpoint}")
    target = f"{c.url}{BASE}/{ep['id']}/openai"
    print(
        f"Forwarding http://{host}:{port}/v1 to endpoint {ep['id']} (Ctrl-C stops). "
        f"Hint: `{prog()} training endpoints get {ep['id'][:8]}` shows its state.",
        flush=True,
    )
    uvicorn.run(build_proxy_app(target, c.headers()), host=host, port=port, log_level="warning")
