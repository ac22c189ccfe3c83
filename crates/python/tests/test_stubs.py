"""The type stubs (`_flumen.pyi`) name every public method of the extension's classes, so
editors complete and type-check all of them."""

import ast
import pathlib

import pytest

import flumen

STUBS = ast.parse((pathlib.Path(flumen.__file__).parent / "_flumen.pyi").read_text())


def stubbed(cls):
    for node in STUBS.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return set()


@pytest.mark.parametrize("cls", ["Dataset", "Iterator", "Batch", "Column", "Options", "Expr", "When"])
def test_every_public_method_has_a_stub(cls):
    public = {n for n in dir(getattr(flumen, cls)) if not n.startswith("_")}
    assert public - stubbed(cls) == set()
