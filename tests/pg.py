"""A throwaway PostgreSQL server for tests (Debian's postgresql package).

Started with ``initdb`` + ``pg_ctl`` in a temporary folder on a free port. As
root, the server runs as the ``postgres`` user (PostgreSQL refuses root). When no
server binary is installed the test is skipped, unless
``AKKA_OPTIMIZE_REQUIRE_POSTGRES=1`` (set by ``.ci/run``), where it fails.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from ports import free_port


def _bin_dir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield an SQLAlchemy URL of a fresh database on a temporary PostgreSQL server."""
    bindir = _bin_dir()
    if bindir is None:
        if os.environ.get("AKKA_OPTIMIZE_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required here but initdb is not installed")
        pytest.skip("PostgreSQL server binaries are not installed")
    root = tempfile.mkdtemp(prefix="akka-pg-")
    data = os.path.join(root, "data")
    port = free_port()
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        shutil.chown(root, "postgres", "postgres")
        os.chmod(root, 0o755)
    subprocess.run(
        prefix + [f"{bindir}/initdb", "-D", data, "-U", "akka", "-A", "trust"],
        check=True,
        capture_output=True,
    )
    sock = root
    subprocess.run(
        prefix
        + [
            f"{bindir}/pg_ctl",
            "-D",
            data,
            "-l",
            os.path.join(root, "log"),
            "-w",
            "-o",
            f"-p {port} -k {sock} -c listen_addresses=127.0.0.1",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            prefix
            + [f"{bindir}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "akka", "akka"],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg://akka@127.0.0.1:{port}/akka"
    finally:
        subprocess.run(
            prefix + [f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
