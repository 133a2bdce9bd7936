"""Every table, one module per concern. Importing this package registers them all."""

from . import auth, catalog, jobs, projects, registry, serving  # noqa: F401
