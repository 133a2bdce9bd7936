"""The ``akka-optimize`` and ``akka`` commands: a thin HTTP client of the service."""
