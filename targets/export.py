"""Leaving Crucible: a checked program rendered as a module that an inference engine loads by itself.

A target declares, per engine, which of its features the engine's objects expose (each as a Python
expression the module evaluates) and the module around the decision function; `render` checks that the
program reads only those features and fills the module in. The module imports nothing of Crucible.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from string import Template

from verifiers.compiler import PLAIN_PRELUDE, plain_source
from verifiers.program import Program, Signature

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ExportError(ValueError):
    """A program this engine cannot run as written (a feature it does not expose); `str()` is one line."""


@dataclass(frozen=True)
class Export:
    """How one engine runs one decision function of a target.

    `features` maps each feature the engine exposes to the expression that computes it inside the
    template's feature builder; a feature absent there is one the engine lacks, never approximated.
    `template` is a string.Template with $name, $origin, $params, $prelude, $function and $features.
    """

    engine: str
    title: str
    signature: str
    features: Mapping[str, str]
    template: str
    load: str
    """How a user loads the written module, one line, with $name for the module's name."""
    entry_point: tuple[str, str] | None = None
    """(group, function) through which the engine's plugin loader imports the module, if it has one."""

    def narrowed(self, signature: Signature) -> Signature:
        """The decision function as a search for this engine writes it: over the features it exposes only."""
        if signature.name != self.signature:
            return signature
        return replace(signature, features=tuple(f for f in signature.features if f in self.features))

    def lacking(self, program: Program) -> tuple[str, ...]:
        """The features the program reads that the engine does not expose, in the order they appear."""
        return tuple(f for f in reads(program, self.signature) if f not in self.features)

    def render(self, program: Program, name: str, origin: str, params: Mapping[str, float]) -> str:
        """The module's source: the program's function, its PARAMS as given, and the engine's glue."""
        if not _IDENTIFIER.fullmatch(name):
            raise ExportError(f"{name!r} is not a Python module name (letters, digits, underscores)")
        lacking = self.lacking(program)
        if lacking:
            shown = ", ".join(f"{self._arg(program)}.{f}" for f in lacking)
            raise ExportError(
                f"{origin} reads {shown}, which {self.title} does not expose; it exposes: "
                f"{', '.join(self.features)}"
            )
        read = reads(program, self.signature)
        features = "".join(f"            {f}={self.features[f]},\n" for f in self.features if f in read)
        values = {**program.defaults(), **params}
        text = Template(self.template).substitute(
            name=name,
            origin=origin,
            params="{\n"
            + "".join(f'    "{k}": {float(values[k])!r},\n' for k in program.param_names())
            + "}",
            prelude=PLAIN_PRELUDE,
            function=plain_source(program, self.signature),
            features=features,
        )
        compile(text, f"{name}.py", "exec")  # a template defect shows here, not in the engine
        return text

    def pyproject(self, name: str) -> str:
        """A pyproject.toml that makes the module installable beside it (with its entry point, if any)."""
        text = (
            '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "0"\n'
            f'description = "A Crucible heuristic exported for {self.engine}"\n\n'
            f'[tool.setuptools]\npy-modules = ["{name}"]\n'
        )
        if self.entry_point is not None:
            group, function = self.entry_point
            text += f'\n[project.entry-points."{group}"]\n{name} = "{name}:{function}"\n'
        return text

    def _arg(self, program: Program) -> str:
        return program.functions[self.signature].args.args[0].arg


def reads(program: Program, signature: str) -> tuple[str, ...]:
    """The features a function reads (attributes of its state argument), each once, in source order."""
    fn = program.functions[signature]
    state = fn.args.args[0].arg
    found = (
        node
        for node in ast.walk(fn)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == state
    )
    ordered = sorted(found, key=lambda n: (n.lineno, n.col_offset))
    return tuple(dict.fromkeys(n.attr for n in ordered))
