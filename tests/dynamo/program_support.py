"""What the backend's `compiler.Program`s hold, for tests that read their compiled graphs."""

from __future__ import annotations

from cuvil.dynamo import compiler


def compiled(program: compiler.Program):
    """The compiled model a `Program` calls (for symbolic dims, else its one static one)."""
    return program.dynamic or next(iter(program.static.values()))
