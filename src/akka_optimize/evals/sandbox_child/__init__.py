"""The grader worker (:mod:`akka_optimize.evals.sandbox`'s child process), as a folder.

:class:`akka_optimize.evals.sandbox.GraderPool` runs this folder by path
(``python -I -S -B .../sandbox_child``): Python then runs ``__main__.py`` with this folder
(only) as ``sys.path[0]``, so the worker imports its ``_sandbox_*`` siblings as top-level
modules and nothing of the platform; this ``__init__`` does not run there. Imported as a
package (documentation, tests), it re-exports the worker's public names:

- :mod:`._sandbox_syscalls`: namespaces, mounts and process relays (:data:`RELAY_MARK`);
- :mod:`._sandbox_isolation`: :func:`isolate`;
- :mod:`._sandbox_limits`: :class:`CpuLimit`, :func:`arm`, :func:`disarm`;
- :mod:`._sandbox_results`: :func:`convert`, :func:`last_line`;
- :mod:`.__main__`: :func:`main` (the protocol loop).
"""

from .__main__ import main as main
from ._sandbox_isolation import isolate as isolate
from ._sandbox_limits import CpuLimit as CpuLimit
from ._sandbox_limits import arm as arm
from ._sandbox_limits import disarm as disarm
from ._sandbox_results import DETAILS_BYTES as DETAILS_BYTES
from ._sandbox_results import ERROR_CHARS as ERROR_CHARS
from ._sandbox_results import TRACEBACK_CHARS as TRACEBACK_CHARS
from ._sandbox_results import convert as convert
from ._sandbox_results import last_line as last_line
from ._sandbox_syscalls import CLONE_NEWNET as CLONE_NEWNET
from ._sandbox_syscalls import CLONE_NEWNS as CLONE_NEWNS
from ._sandbox_syscalls import CLONE_NEWPID as CLONE_NEWPID
from ._sandbox_syscalls import CLONE_NEWUSER as CLONE_NEWUSER
from ._sandbox_syscalls import MS_BIND as MS_BIND
from ._sandbox_syscalls import MS_NODEV as MS_NODEV
from ._sandbox_syscalls import MS_NOSUID as MS_NOSUID
from ._sandbox_syscalls import MS_PRIVATE as MS_PRIVATE
from ._sandbox_syscalls import MS_RDONLY as MS_RDONLY
from ._sandbox_syscalls import MS_REC as MS_REC
from ._sandbox_syscalls import MS_REMOUNT as MS_REMOUNT
from ._sandbox_syscalls import NOBODY as NOBODY
from ._sandbox_syscalls import PR_SET_DUMPABLE as PR_SET_DUMPABLE
from ._sandbox_syscalls import PR_SET_NO_NEW_PRIVS as PR_SET_NO_NEW_PRIVS
from ._sandbox_syscalls import PR_SET_PDEATHSIG as PR_SET_PDEATHSIG
from ._sandbox_syscalls import RELAY_MARK as RELAY_MARK
