"""akka-optimize: self-hosted post-training for language models.

Register a dataset, submit a run plan, train a LoRA adapter, register it as a
versioned model, serve it behind an OpenAI-compatible endpoint.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("akka-optimize")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
