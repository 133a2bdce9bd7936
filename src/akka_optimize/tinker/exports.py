"""Signed download URLs for external weights (``tinker checkpoint download``, issue 53
"Checkpoints out and in").

``save_weights_external(name)`` stores the adapter as a PEFT folder (``adapter_config.json``
and ``adapter_model.safetensors``) under the checkpoint ``external_weights/NAME`` of the
training run. ``RestClient.get_external_weights_urls`` answers one URL per file; the SDK
CLI fetches each with a plain GET that carries no key (``urllib.request.urlopen``), so the
URL itself is the permission: an HMAC-SHA256 under the server's secret of the run, the
checkpoint, the file and the expiry, valid :data:`URL_SECONDS`. A URL names one file of one
checkpoint; it opens nothing else, and stops working when it expires or the checkpoint is
deleted or expires.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any
from urllib.parse import quote

from ..errors import Forbidden

URL_SECONDS = 3600
"""How long a signed URL works (the SDK CLI re-signs when fewer than 5 minutes are left)."""
LABEL = b"akka-optimize tinker external weights url v1"


def _key(secret: bytes) -> bytes:
    return hmac.new(secret, LABEL, hashlib.sha256).digest()


def signature(secret: bytes, run_id: str, cid: str, path: str, expires: int) -> str:
    """The hex HMAC-SHA256 of one file's URL (``run_id``, checkpoint ``cid``, the file's
    ``path`` in the checkpoint, ``expires`` in Unix seconds) under a key derived from the
    server's ``secret`` (never the secret itself)."""
    msg = "\n".join((run_id, cid, path, str(expires))).encode()
    return hmac.new(_key(secret), msg, hashlib.sha256).hexdigest()


def signed_urls(
    base_url: str, secret: bytes, run_id: str, cid: str, files: list[str], now: float | None = None
) -> dict[str, Any]:
    """The SDK's ``ExternalWeightsUrlsResponse``: ``{"urls": {path: url}, "expires": ISO}``.

    Args:
        base_url: the service's address as the client reached it (no trailing ``/``).
        files: paths relative to the checkpoint's folder.
    """
    import datetime as dt

    expires = int(now if now is not None else time.time()) + URL_SECONDS
    urls = {}
    for path in files:
        sig = signature(secret, run_id, cid, path, expires)
        urls[path] = (
            f"{base_url}/api/v1/external_weights/{quote(run_id, safe='')}/{cid}/{quote(path)}"
            f"?expires={expires}&signature={sig}"
        )
    at = dt.datetime.fromtimestamp(expires, dt.UTC).isoformat()
    return {"urls": urls, "expires": at}


def check(
    secret: bytes,
    run_id: str,
    cid: str,
    path: str,
    expires: int,
    sig: str,
    now: float | None = None,
) -> None:
    """Accept a signed URL's parts or refuse them.

    Raises:
        Forbidden: (field ``signature``) the signature does not match or the URL expired.
    """
    want = signature(secret, run_id, cid, path, expires)
    if not hmac.compare_digest(want, sig or ""):
        raise Forbidden(
            "signature does not match this file; ask get_external_weights_urls for a new URL.",
            field="signature",
        )
    if expires < (now if now is not None else time.time()):
        raise Forbidden(
            "this URL expired; ask get_external_weights_urls for a new one.", field="signature"
        )
