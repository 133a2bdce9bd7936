"""The grader worker (:mod:`akka_optimize.evals.sandbox.pool`'s child process), as a folder.

:class:`akka_optimize.evals.sandbox.pool.GraderPool` runs this folder by path
(``python -I -S -B .../sandbox_child``): Python then runs ``__main__.py`` with this folder
(only) as ``sys.path[0]``, so the worker imports its ``_sandbox_*`` siblings as top-level
modules and nothing of the platform. This ``__init__`` does not run there, and the worker's
modules are not meant to be imported as part of the package:

- ``_sandbox_syscalls``: namespaces, mounts and process relays (``RELAY_MARK``);
- ``_sandbox_isolation``: ``isolate`` and the isolation report;
- ``_sandbox_limits``: ``CpuLimit``, ``arm``, ``disarm``;
- ``_sandbox_results``: ``convert``, ``last_line``;
- ``__main__``: ``main`` (the protocol loop).
"""
