"""Test helpers shared by every test module: a live service and the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

import forked_cli
from akka_optimize.forkserver import ForkedProcess
from cluster_stores import store_env
from ports import free_port  # noqa: F401 (tests import it from here)

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CASES = Path(__file__).parent / "cases"
#: One weights cache for every test service (``AKKA_OPTIMIZE_WEIGHTS_DIR``): the tiny
#: model is built once per test session instead of once per service (its tokenizer alone
#: is converted from a 270 MB GGUF file). Fetches lock per model version, so services
#: share it safely; the catalog tests, which watch fetches happen, opt out
#: (:data:`SHARE_WEIGHTS`, ``tests/catalog/conftest.py``).
WEIGHTS = Path(os.environ.get("AKKA_OPTIMIZE_TEST_CACHE", REPO / ".cache" / "test-models"))
WEIGHTS = WEIGHTS / "service-weights"
SHARE_WEIGHTS = True


def gsm8k_rows(path: Path, n: int, offset: int = 0, system: str | None = None) -> Path:
    """Write ``n`` GSM8K items as conversations (question → worked answer ending ``#### N``)."""
    items = [json.loads(x) for x in (REPO / "data/gsm8k/train.jsonl").open()][offset : offset + n]
    with path.open("w") as f:
        for it in items:
            msgs = [
                {"role": "user", "content": it["question"]},
                {"role": "assistant", "content": it["answer"]},
            ]
            if system:
                msgs.insert(0, {"role": "system", "content": system})
            f.write(json.dumps({"messages": msgs}) + "\n")
    return path


def base_env(home: Path, config_dir: Path) -> dict[str, str]:
    """A clean environment for the service and CLI rooted at ``home``."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AKKA_", "TRAINER_", "REGISTRY_"))
    }
    env["AKKA_OPTIMIZE_HOME"] = str(home)
    env["AKKA_OPTIMIZE_CONFIG"] = str(config_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env["AKKA_OPTIMIZE_TEST_HOLD"] = str(home / "test-hold")  # see hold_at
    env.update(store_env(home))  # PostgreSQL + S3 in the second pass (tests/cluster_stores.py)
    if SHARE_WEIGHTS:
        env["AKKA_OPTIMIZE_WEIGHTS_DIR"] = str(WEIGHTS)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


@dataclass
class LiveService:
    """A real ``akka-optimize server start`` subprocess on a free loopback port."""

    home: Path
    config_dir: Path
    port: int
    extra_env: dict[str, str] = field(default_factory=dict)
    workers: int = field(
        default_factory=lambda: int(os.environ.get("AKKA_OPTIMIZE_TEST_WORKERS", "1"))
    )
    """``server start --workers``: 1, the single process, unless a test is about several
    (``AKKA_OPTIMIZE_TEST_WORKERS=2`` runs every live service of a test run with two)."""
    proc: subprocess.Popen | ForkedProcess | None = None
    token: str | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, **overrides: str) -> dict[str, str]:
        """Environment for a CLI subprocess talking to this service with its token."""
        env = base_env(self.home, self.config_dir)
        env.update(self.extra_env)
        env["AKKA_OPTIMIZE_URL"] = self.url
        if self.token:
            env["AKKA_OPTIMIZE_TOKEN"] = self.token
        env.update(overrides)
        return env

    def start(self, wait_started: bool = True, timeout: float = 180) -> LiveService:
        self.home.mkdir(parents=True, exist_ok=True)
        env = base_env(self.home, self.config_dir)
        env.update(self.extra_env)
        self.log_path = self.home / "server.log"
        cmd = [
            str(BIN / "akka-optimize"),
            *("server", "start", "--port", str(self.port), "--log-level", "warning"),
            *("--workers", str(self.workers)),
        ]
        self.proc = forked_cli.start(cmd, env, self.log_path)  # its imports done (issue 28)
        if self.proc is None:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"service exited: {self.log_path.read_text()[-3000:]}")
                try:
                    if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            else:
                raise RuntimeError("service did not answer /healthz in time")
            if self.token is None:
                self.token = self.create_token()
            if wait_started:
                self.wait_started(deadline - time.monotonic())
        except BaseException:  # a service that did not start is not left running
            self.stop()
            raise
        return self

    def create_token(self, project: str | None = None) -> str:
        args = [str(BIN / "akka-optimize"), "server", "token", "create"]
        if project:
            args += ["--project", project]
        env = base_env(self.home, self.config_dir)
        env.update(self.extra_env)
        out = forked_cli.run(args, env, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {out.returncode}:\n{out.stderr}")
        return out.stdout.strip().splitlines()[-1]

    def wait_started(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = httpx.get(self.url + "/v1/training/info", headers=self.headers(), timeout=2)
            if r.status_code == 200 and r.json().get("startedCompletely"):
                return
            time.sleep(0.1)
        raise RuntimeError("service did not start completely in time")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def api(self, method: str, path: str, **kw) -> httpx.Response:
        """A raw HTTP request with this service's token."""
        kw.setdefault("timeout", 120)
        return httpx.request(method, self.url + path, headers=self.headers(), **kw)

    @contextmanager
    def running(self) -> Iterator[LiveService]:
        """The service started, then stopped; no worker stays held at a test hold point."""
        self.start()
        try:
            yield self
        finally:
            (self.home / "test-hold").unlink(missing_ok=True)
            self.stop()

    def stop(self, sig: int | None = None) -> None:
        if self.proc and self.proc.poll() is None:
            if sig is not None:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def cli(
        self,
        *args: str,
        prog: str = "akka-optimize",
        check: bool = False,
        env: dict[str, str] | None = None,
        timeout: float = 600,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run the real CLI as a subprocess against this service."""
        cmd = (
            [str(BIN / "akka-optimize")]
            if prog == "akka-optimize"
            else [str(BIN / "akka"), "optimize"]
        )
        if prog == "akka-registry":
            cmd = [str(BIN / "akka")]
        out = forked_cli.run(cmd + list(args), env or self.env(), timeout, input)
        if check and out.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd + list(args))} exited {out.returncode}\n"
                f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
            )
        return out


def hold_at(svc: LiveService, point: str) -> None:
    """Make the service's workers wait at ``point`` (``step-N``: after update N is
    scored, before its metrics are reported; ``answer``: before a worker answers a chat
    request) until :func:`release` (:mod:`akka_optimize.testhooks`)."""
    held = svc.home / "test-hold.held"
    held.unlink(missing_ok=True)
    (svc.home / "test-hold").write_text(point)


def wait_held(svc: LiveService, timeout: float = 300) -> None:
    """Wait until a worker is waiting at the point :func:`hold_at` named."""
    deadline = time.monotonic() + timeout
    while not (svc.home / "test-hold.held").exists():
        assert time.monotonic() < deadline, f"no worker reached the hold point in {timeout}s"
        time.sleep(0.05)


def release(svc: LiveService) -> None:
    """Let a worker held by :func:`hold_at` go on."""
    (svc.home / "test-hold").unlink(missing_ok=True)


def make_random_adapter(base_dir: Path, dest: Path, seed: int, rank: int = 8) -> Path:
    """A LoRA adapter with random non-zero A and B (so it changes the answers)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj", "o_proj"])
    peft = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    peft.save_pretrained(dest)
    return dest


CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def byte_tokenizer(
    dest: Path | None, specials: dict[str, int] | None = None, extra: dict[str, str] | None = None
):
    """Save a fast tokenizer: 3 specials and ``<unk>`` (ids 0–3), then the byte-level
    characters of newline and printable ASCII (ids 4–99), no merges. ``specials`` adds
    special tokens at the given ids (unused tokens fill the ids between, so they sit
    where a tiny config's image token ids are) and ``extra`` names them
    (``extra_special_tokens``: ``image_token`` …). Returns the tokenizer; with ``dest``
    None it is not saved."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # GPT-2's byte-to-character map: printable ASCII is itself, bytes 0-32 are chr(256 + b)
    vocab = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "<unk>": 3}
    for b in [10, *range(32, 127)]:
        vocab[chr(256 + b) if b <= 32 else chr(b)] = len(vocab)
    specials = specials or {}
    while specials and len(vocab) < min(specials.values()):
        vocab[f"<unused{len(vocab)}>"] = len(vocab)
    vocab |= specials
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>", *specials],
        **({"extra_special_tokens": extra} if extra else {}),
    )
    fast.chat_template = CHATML
    if dest is not None:
        fast.save_pretrained(dest)
    return fast
