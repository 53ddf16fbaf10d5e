"""The metadata records are interpreted in one place (docs/decisions.md, "One metadata image"):
no first-party module outside ``brook.metadata`` dispatches on a record's kind
(``WhichOneof("record")``, or ``WhichOneof(NAME)`` with ``NAME = "record"`` a constant of the
module); every process reads the shared image, delta and typed views. Read from the source
(ast, nothing imported)."""

from __future__ import annotations

import ast

from test_import_graph import _modules

METADATA_PACKAGE = "brook.metadata"


def _record_constants(tree: ast.Module) -> set[str]:
    """Names the module binds to the string "record" at its top level."""
    names = set()
    for statement in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign):
            targets, value = [statement.target], statement.value
        if isinstance(value, ast.Constant) and value.value == "record":
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _dispatches_on_record_kind(node: ast.AST, constants: set[str]) -> bool:
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "WhichOneof"
        and len(node.args) == 1
    ):
        return False
    argument = node.args[0]
    if isinstance(argument, ast.Name):
        return argument.id in constants
    return isinstance(argument, ast.Constant) and argument.value == "record"


def _dispatchers(source: str, filename: str = "<source>") -> list[int]:
    """Lines of ``source`` that dispatch on a metadata record's kind."""
    tree = ast.parse(source, filename)
    constants = _record_constants(tree)
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _dispatches_on_record_kind(node, constants)
    ]


def test_only_brook_metadata_dispatches_on_the_kind_of_a_metadata_record() -> None:
    offenders = sorted(
        f"{name}:{line}"
        for name, path in _modules().items()
        if name != METADATA_PACKAGE and not name.startswith(METADATA_PACKAGE + ".")
        for line in _dispatchers(path.read_text(), str(path))
    )
    assert offenders == [], f"WhichOneof('record') outside {METADATA_PACKAGE}: {offenders}"


def test_the_check_sees_the_image_dispatcher() -> None:
    """Guards the check itself: it finds the one dispatcher there is."""
    path = _modules()[f"{METADATA_PACKAGE}.image"]
    assert _dispatchers(path.read_text())
    assert _dispatchers('KIND = "record"\nrecord.WhichOneof(KIND)\n') == [2]
    assert _dispatchers('KIND = "other"\nrecord.WhichOneof(KIND)\n') == []
