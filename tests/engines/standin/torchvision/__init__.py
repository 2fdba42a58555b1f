"""An import stand-in for torchvision in SGLang's test environment, installed by .ci/engines.

PyPI's torchvision needs CUDA's libtorch and fails to import beside the CPU build of torch, while SGLang
imports it at module level for its multimodal models. The radix cache never uses it: every name here is
a placeholder, and calling one raises, so nothing runs on the stand-in unnoticed.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0+standin"


class _Absent:
    """Any attribute of the stand-in: more placeholders below it, an error when called."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> "_Absent":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(f"{self._name}.{attr}")

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{self._name}: torchvision is only an import stand-in in this environment")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _Module(types.ModuleType):
    def __getattr__(self, attr: str) -> _Absent:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every torchvision submodule as a module of placeholders."""

    def find_spec(self, name, path, target=None):
        if name.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())
__path__ = []


def __getattr__(attr: str) -> _Absent:
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _Absent(f"{__name__}.{attr}")
