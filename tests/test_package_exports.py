"""Every package's __init__ says what it offers, and every name it offers is there."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = ["actors", "actors.apis", "actors.core", "actors.runtime", "actors.sim",
            "actors.trace", "wire", "wire.kafka_codec"]
LAZY = ["actors", "wire"]  # imported by everything below them: their names load on first use


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name: str) -> None:
    package = importlib.import_module(name)
    assert package.__doc__, f"{name}/__init__.py has no docstring"
    assert package.__all__, f"{name} exports nothing"
    for attr in package.__all__:
        value = getattr(package, attr)
        module = getattr(value, "__module__", None)
        if module is not None and (inspect.isclass(value) or inspect.isfunction(value)):
            assert getattr(importlib.import_module(module), value.__name__) is value


@pytest.mark.parametrize("name", LAZY)
def test_lazy_exports_match_their_typing_imports(name: str) -> None:
    package = importlib.import_module(name)
    assert package.__file__ is not None
    tree = ast.parse(Path(package.__file__).read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module is not None
                for alias in stmt.names:
                    typed[alias.asname or alias.name] = stmt.module
    assert typed == package._EXPORTS
    for attr, module in package._EXPORTS.items():
        assert getattr(package, attr) is getattr(importlib.import_module(module), attr)
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'nothing_here'"):
        package.nothing_here  # noqa: B018


@pytest.mark.parametrize(("package", "heavy"), [("actors", "zmq"), ("wire", "kafka.protocol")])
def test_importing_a_lazy_package_loads_nothing_heavy(package: str, heavy: str) -> None:
    code = f"import sys, {package}; print({heavy!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
