"""The local blob store: a blob is visible only once complete (store.py), even when the
process writing it is killed (SIGKILL) in the middle of the write (issue 56 item 3).

The writer is held at the ``blob-write`` hold point (:mod:`akka_optimize.testhooks`)
after its bytes have reached the file system and before it commits them; the test looks
at the key while the write is held, kills the process there, and looks again. A writer
that wrote straight to the final key would show a partial object at both looks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from akka_optimize.store import BlobStore

KEY = "runs/r1/state/step-1/adapter.safetensors"
SIZE = 3 << 20  # 3 MiB: past any write buffer, so the bytes are in a file when held


def _wait_held(held: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not held.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the writer ended ({proc.returncode}) before the hold point")
        assert time.monotonic() < deadline, f"the writer never reached the hold point in {timeout}s"
        time.sleep(0.05)


def test_a_writer_killed_mid_write_leaves_nothing_at_its_key(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    store = BlobStore(str(root))
    store.put_bytes(KEY, b"old")  # a committed blob the killed write would replace
    hold = tmp_path / "test-hold"
    hold.write_text("blob-write")
    script = textwrap.dedent(
        f"""
        from akka_optimize.store import BlobStore
        BlobStore({str(root)!r}).put_bytes({KEY!r}, b"y" * {SIZE})
        """
    )
    env = {**os.environ, "AKKA_OPTIMIZE_TEST_HOLD": str(hold)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        _wait_held(Path(f"{hold}.held"), proc)
        # held mid-write: the key still reads the old blob; the new bytes are on disk
        # under .tmp/ only
        assert store.get_bytes(KEY) == b"old" and store.list("runs") == [KEY]
        assert [p.stat().st_size for p in (root / ".tmp").iterdir()] == [SIZE]
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert store.get_bytes(KEY) == b"old" and store.list("runs") == [KEY]
    assert store.sweep_tmp() == 1  # what a service start does: the orphan goes
    assert not (root / ".tmp").exists() or list((root / ".tmp").iterdir()) == []
    store.put_bytes(KEY, b"new")  # the next write and read work
    assert store.get_bytes(KEY) == b"new" and store.list("runs") == [KEY]
