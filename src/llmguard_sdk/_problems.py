"""pydantic's validation errors as the one-line problems our errors show."""

from __future__ import annotations

from collections.abc import Collection

from pydantic import ValidationError

__all__ = ["problems"]


def problems(exc: ValidationError, default: str, skip: Collection[str] = ()) -> list[str]:
    """Each error of ``exc`` as ``location: message``: the location's parts joined by dots,
    ``skip`` (a union's branch names) left out, ``default`` where none is left."""
    return [
        f"{'.'.join(str(p) for p in err['loc'] if p not in skip) or default}: {err['msg']}"
        for err in exc.errors()
    ]
