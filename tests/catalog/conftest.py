"""The catalog tests watch fetches and conversions happen in a service's own home, so
their services keep ``home/weights`` instead of the suite's shared weights cache."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import helpers


@pytest.fixture(autouse=True, scope="module")
def _own_weights() -> Iterator[None]:
    helpers.SHARE_WEIGHTS = False
    try:
        yield
    finally:
        helpers.SHARE_WEIGHTS = True
