"""Regenerate the initial migration from the models (pre-release only).

Until the first release the schema has one migration, ``0001_initial``, rebuilt
from :mod:`akka_optimize.db.models` with Alembic's autogenerate. Run after
changing a table:

    .venv/bin/python scripts/regen_migration.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from alembic import command

from akka_optimize.db.migrate import MIGRATIONS, alembic_config

VERSIONS = MIGRATIONS / "versions"


def main() -> None:
    for p in VERSIONS.glob("*.py"):
        p.unlink()
    with tempfile.TemporaryDirectory() as d:
        cfg = alembic_config(f"sqlite:///{Path(d) / 'empty.db'}")
        command.revision(cfg, message="initial schema", autogenerate=True, rev_id="0001_initial")
    print(f"wrote {next(VERSIONS.glob('*.py'))}")


if __name__ == "__main__":
    main()
