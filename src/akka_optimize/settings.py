"""Where the platform keeps its state, and how it is reached.

Environment (DESIGN.md "Embedded default", seeds/001 "Other changes"):

- ``AKKA_OPTIMIZE_HOME``: the home folder (default ``~/.akka-optimize``) holding
  ``state.db``, ``blobs/``, ``weights/`` and ``deployment.yaml``.
- ``AKKA_OPTIMIZE_DATABASE_URL``: an SQLAlchemy URL (``postgresql+psycopg://…``);
  default SQLite in WAL mode at ``$AKKA_OPTIMIZE_HOME/state.db``.
- ``AKKA_OPTIMIZE_BLOBS_URL``: an fsspec URL (``s3://bucket/prefix``); default
  ``$AKKA_OPTIMIZE_HOME/blobs``.
- ``AKKA_OPTIMIZE_WEIGHTS_DIR``: the weights cache where selected base models are
  converted (default ``$AKKA_OPTIMIZE_HOME/weights``): a shared volume lets several
  services, and every run and endpoint, read one copy (seeds/000 "Base model
  flexibility"). Fetches take a file lock per model version, so services may share it.
- ``AKKA_OPTIMIZE_DEPLOYMENT``: a deployment file; default
  ``$AKKA_OPTIMIZE_HOME/deployment.yaml`` when present, else the one shipped in
  the package (one machine, CPU or one CUDA device).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def default_home() -> Path:
    """``$AKKA_OPTIMIZE_HOME`` or ``~/.akka-optimize`` (not created)."""
    env = os.environ.get("AKKA_OPTIMIZE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".akka-optimize"


@dataclass
class Settings:
    """Resolved service settings. Build with :meth:`from_env` or directly in tests."""

    home: Path = field(default_factory=default_home)
    database_url: str | None = None
    blobs_url: str | None = None
    deployment_file: Path | None = None
    startup_delay_s: float = 0.0
    weights_path: Path | None = None
    """The weights cache when not ``home/weights`` (``AKKA_OPTIMIZE_WEIGHTS_DIR``)."""

    def __post_init__(self) -> None:
        self.home = Path(self.home).expanduser()
        if not self.database_url:
            self.database_url = f"sqlite:///{self.home / 'state.db'}"
        if not self.blobs_url:
            self.blobs_url = str(self.home / "blobs")

    @classmethod
    def from_env(cls, home: Path | None = None) -> Settings:
        """Settings from the environment variables documented in this module."""
        dep = os.environ.get("AKKA_OPTIMIZE_DEPLOYMENT")
        weights = os.environ.get("AKKA_OPTIMIZE_WEIGHTS_DIR")
        return cls(
            home=home or default_home(),
            database_url=os.environ.get("AKKA_OPTIMIZE_DATABASE_URL") or None,
            blobs_url=os.environ.get("AKKA_OPTIMIZE_BLOBS_URL") or None,
            deployment_file=Path(dep) if dep else None,
            startup_delay_s=float(os.environ.get("AKKA_OPTIMIZE_STARTUP_DELAY", "0") or 0),
            weights_path=Path(weights).expanduser() if weights else None,
        )

    @property
    def weights_dir(self) -> Path:
        """The shared weights cache: converted base models live here."""
        return self.weights_path or self.home / "weights"

    @property
    def runs_dir(self) -> Path:
        """Per-attempt scratch folders of local workers (logs, job specs)."""
        return self.home / "runs"

    def ensure_dirs(self) -> None:
        """Create the home folder and its local sub-folders, private to this user (0700)."""
        for p in (self.home, self.weights_dir, self.runs_dir):
            p.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.home.chmod(0o700)

    def resolved_deployment_file(self) -> Path | None:
        """The deployment file in force, or ``None`` for the shipped default."""
        if self.deployment_file:
            return self.deployment_file
        p = self.home / "deployment.yaml"
        return p if p.exists() else None
