"""Registry references: one grammar for datasets, scoring bundles and models.

Forms (seeds/001 "Datasets live in the registry", "Models live in the registry"):

- ``NS/NAME`` resolves through ``latest`` (the highest version);
- ``NS/NAME:vN`` names version N (N >= 1);
- ``NS/NAME:ALIAS`` names the version an alias points at (``candidate``, ``champion``, …);
- ``NS/NAME@sha256:<64 hex>`` names a version by its digest;
- ``NS/NAME:vN@sha256:<64 hex>`` is the pinned form :func:`akka_optimize.registry.resolve`
  records; both parts must agree;
- a bare ``NAME`` (with any of the selectors above) lies in the project given by the
  request: ``train`` in project ``triage`` is ``triage/train``;
- a hub repository ``Owner/Repo`` names the base model ``owner/repo``.

A reference is not case sensitive ("Triage/Train is triage/train"): everything is
lower-cased. Names, namespaces, aliases and project names follow one naming rule,
:func:`validate_name`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidRequest

MAX_NAME_LENGTH = 100
"""Longest namespace, name, alias or project name, in characters."""

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")

NAME_PATTERN = r"^[A-Za-z0-9](\.?[A-Za-z0-9_-])*\.?$"
""":func:`validate_name`'s rule as one regular expression, for documents (the OpenAPI
``pattern`` of every name parameter, issue 48): ASCII letters of either case (a name is
lower-cased on reading), digits, ``.``, ``_`` and ``-``, a letter or digit first, and no
``..`` (each ``.`` is followed by another character or ends the name). Its length bound is
:data:`MAX_NAME_LENGTH`."""

REF_NAME_PATTERN = (
    r"^[A-Za-z0-9](\.?[A-Za-z0-9_-])*\.?"
    r"(:[Vv][1-9][0-9]{0,17}(@[Ss][Hh][Aa]256:[0-9A-Fa-f]{64})?"
    r"|:[A-Za-uw-zA-UW-Z0-9](\.?[A-Za-z0-9_-])*\.?"
    r"|@[Ss][Hh][Aa]256:[0-9A-Fa-f]{64})?$"
)
"""The ``NAME`` part of a reference with its optional selector (``NAME``, ``NAME:vN``,
``NAME:vN@sha256:<64 hex>``, ``NAME:ALIAS``, ``NAME@sha256:<64 hex>``), as one regular
expression for documents (module docstring; :func:`parse_ref`). An alias documented here
does not start with ``v`` (``v0`` and ``v`` plus a huge number are refused as versions),
and a version has at most 18 digits (below :data:`MAX_VERSION`); both are narrower than
:func:`parse_ref` accepts, never wider."""
REF_PATTERN = r"^([A-Za-z0-9](\.?[A-Za-z0-9_-])*\.?/)?" + REF_NAME_PATTERN[1:]
"""A whole reference, ``[NS/]NAME[selector]``, as one regular expression for documents
(:data:`REF_NAME_PATTERN` after an optional namespace); a reference without a namespace
resolves in the request's project, which a document's pattern cannot check."""
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_VERSION_RE = re.compile(r"v([0-9]+)")


@dataclass(frozen=True)
class Ref:
    """A parsed reference. At most one of ``version``/``alias`` is set; ``digest`` may
    accompany ``version`` (the pinned form).

    Attributes:
        namespace: lower-case namespace (a project name, or a hub owner for base models).
        name: lower-case name inside the namespace.
        version: the version number N of ``:vN``, or None.
        alias: the alias of ``:ALIAS``, or None.
        digest: ``sha256:<64 lower-case hex>``, or None.
    """

    namespace: str
    name: str
    version: int | None = None
    alias: str | None = None
    digest: str | None = None

    @property
    def repo(self) -> str:
        """``namespace/name`` without a selector."""
        return f"{self.namespace}/{self.name}"

    @property
    def selector(self) -> str:
        """``latest`` when no version, alias or digest is given; else ``vN``, the alias or
        the digest (the digest when both a version and a digest are given)."""
        if self.digest:
            return self.digest
        if self.version is not None:
            return f"v{self.version}"
        if self.alias:
            return self.alias
        return "latest"

    def __str__(self) -> str:
        out = self.repo
        if self.version is not None:
            out += f":v{self.version}"
        elif self.alias:
            out += f":{self.alias}"
        if self.digest:
            out += f"@{self.digest}"
        return out


#: The largest version number a reference may name (a signed 64-bit SQL integer).
MAX_VERSION = 2**63 - 1


def validate_name(name: str, field: str) -> str:
    """Check one name against the registry's naming rule and return it lower-cased.

    The rule (seeds/001 "Project names" — project names follow the registry's naming
    rules): lower-case letters, digits, ``.``, ``_`` and ``-``; starting with a letter or
    digit; no ``..``; 1 to :data:`MAX_NAME_LENGTH` characters. Upper-case input is
    accepted and lower-cased, because references are not case sensitive.

    Args:
        name: the candidate name.
        field: the request field to name in the refusal (``ref``, ``project``, ``alias``…).

    Raises:
        InvalidRequest: (``field=field``) the name breaks the rule; the sentence says how.
    """
    if not isinstance(name, str):
        raise InvalidRequest(f"{field} must be a string, not {type(name).__name__}.", field=field)
    if not name.isascii():
        # Checked before lower-casing: the Kelvin sign (U+212A) lower-cases to an ASCII
        # 'k', so a folded name would pass for one it is not.
        raise InvalidRequest(
            f"{field} {name!r} is not a valid name: use lower-case letters, digits, '.', '_' "
            "and '-' (ASCII only), starting with a letter or digit.",
            field=field,
        )
    low = name.lower()
    if not low:
        raise InvalidRequest(f"{field} is empty; give a name such as triage.", field=field)
    if len(low) > MAX_NAME_LENGTH:
        raise InvalidRequest(
            f"{field} {name!r} is {len(low)} characters long; the limit is {MAX_NAME_LENGTH}.",
            field=field,
        )
    if not _NAME_RE.fullmatch(low):
        raise InvalidRequest(
            f"{field} {name!r} is not a valid name: use lower-case letters, digits, '.', '_' "
            "and '-', starting with a letter or digit.",
            field=field,
        )
    if ".." in low:
        raise InvalidRequest(f"{field} {name!r} must not contain '..'.", field=field)
    return low


def _bad(ref: str, why: str, field: str) -> InvalidRequest:
    return InvalidRequest(
        f"Reference {ref!r} is not valid: {why}. Use NS/NAME, NS/NAME:vN, NS/NAME:ALIAS or "
        "NS/NAME@sha256:<64 hex>.",
        field=field,
    )


def parse_ref(ref: str, project: str | None = None, *, field: str = "ref") -> Ref:
    """Parse a registry reference (grammar in the module docstring).

    Args:
        ref: the reference as written by a user (any case).
        project: the request's project; a bare ``NAME`` resolves in it.
        field: the request field named in refusals (default ``ref``).

    Returns:
        A lower-cased :class:`Ref`.

    Raises:
        InvalidRequest: (``field=field``) empty or malformed reference, a bad digest, a
            name breaking :func:`validate_name`, or a bare name without a project.
    """
    if not isinstance(ref, str) or not ref.strip():
        raise _bad(str(ref), "it is empty", field)
    if not ref.isascii():
        raise _bad(ref, "it holds a character that is not ASCII", field)
    text = ref.strip().lower()
    digest = None
    if "@" in text:
        text, _, digest = text.partition("@")
        if not _DIGEST_RE.fullmatch(digest):
            raise _bad(
                ref, f"the digest {digest!r} is not sha256: followed by 64 hex digits", field
            )
    tag = None
    if ":" in text:
        text, _, tag = text.partition(":")
        if not tag:
            raise _bad(ref, "nothing follows ':'", field)
    parts = text.split("/")
    if len(parts) == 1:
        if project is None:
            raise _bad(ref, "it names no namespace and the request names no project", field)
        namespace = validate_name(project, "project")
        name = parts[0]
    elif len(parts) == 2:
        namespace, name = parts
        if not namespace or not name:
            raise _bad(ref, "the namespace and the name must both be given", field)
    else:
        raise _bad(ref, "it has more than one '/'", field)
    try:
        namespace = validate_name(namespace, field)
        name = validate_name(name, field)
    except InvalidRequest as exc:
        raise _bad(ref, exc.message.rstrip("."), field) from exc
    version = alias = None
    if tag is not None:
        m = _VERSION_RE.fullmatch(tag)
        if m:
            version = int(m.group(1))
            if version < 1:
                raise _bad(ref, "versions start at v1", field)
            if version > MAX_VERSION:
                raise _bad(ref, f"the version is larger than {MAX_VERSION}", field)
        elif tag != "latest":
            try:
                alias = validate_name(tag, field)
            except InvalidRequest as exc:
                raise _bad(ref, f"the alias {tag!r} is not a valid name", field) from exc
    if digest and alias:
        raise _bad(ref, "an alias and a digest cannot be combined", field)
    return Ref(namespace=namespace, name=name, version=version, alias=alias, digest=digest)


def repository_ref(repository: str) -> Ref:
    """The base-model name of a hub repository: ``Qwen/Qwen3-0.6B`` → ``qwen/qwen3-0.6b``.

    Raises:
        InvalidRequest: (``field=repository``) the repository cannot be named in the
            registry (seeds/001 "Base model selection").
    """
    r = parse_ref(repository, None, field="repository")
    if r.version is not None or r.alias or r.digest:
        raise InvalidRequest(
            f"Repository {repository!r} must be OWNER/NAME without a version or digest.",
            field="repository",
        )
    return r


#: A grader (seeds/001 graders; it lives here, below ``plan/`` and ``evals/``, which both
#: state it) as one regular expression for documents (``model:REFERENCE`` or
#: ``bundle:REFERENCE#MODULE[:FUNCTION]``; narrower than
#: :func:`akka_optimize.evals.graders.spec.parse_grader`: lower-case prefixes, no spaces).
GRADER_PATTERN = (
    "^(model:" + REF_PATTERN[1:-1] + "|bundle:" + REF_PATTERN[1:-1]
    + "#[A-Za-z_][A-Za-z0-9_]*(:[A-Za-z_][A-Za-z0-9_]*)?)$"
)  # fmt: skip
