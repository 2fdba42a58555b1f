"""Canonical program identity: the same program up to docstrings, comments and layout hashes the same."""

from __future__ import annotations

import ast
import hashlib

from verifiers.program import is_docstring


def fingerprint(source: str) -> str:
    """A short hash of the module's AST with docstrings removed; unparsable source hashes its text."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return hashlib.sha256(source.encode()).hexdigest()[:16]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and is_docstring(body[0]):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()[:16]
