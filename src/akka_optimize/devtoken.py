"""The development token: ``dev_`` + an HMAC of a fixed label under the secret in
``$AKKA_OPTIMIZE_HOME/dev-secret`` (issue 2, seeds/000 "Smaller changes").

The service accepts it (:mod:`akka_optimize.core.auth`) and the CLI mints it for a
local trainer (:mod:`akka_optimize.cli.client`); it lives a floor below both so the CLI
reads it without importing the service.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

DEV_LABEL = b"akka-optimize development token v1"
DEV_PREFIX = "dev_"


def dev_secret_path(home: Path) -> Path:
    """Where the development-token secret lives in a server home."""
    return home / "dev-secret"


def ensure_dev_secret(home: Path) -> bytes:
    """Create (mode 0600) or read the development-token secret of ``home``."""
    p = dev_secret_path(home)
    if not p.exists():
        home.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        os.replace(tmp, p)
    return p.read_text().strip().encode()


def mint_dev_token(secret: bytes) -> str:
    """The development token for a server whose secret is ``secret``."""
    return DEV_PREFIX + hmac.new(secret, DEV_LABEL, hashlib.sha256).hexdigest()
