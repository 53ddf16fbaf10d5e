"""The metadata records are interpreted in one place (docs/decisions.md, "One metadata image"):
no first-party module outside ``brook.metadata`` dispatches on a record's kind
(``WhichOneof("record")``); every process reads the shared image, delta and typed views.
Read from the source (ast, nothing imported)."""

from __future__ import annotations

import ast

from test_import_graph import _modules

METADATA_PACKAGE = "brook.metadata"


def _dispatches_on_record_kind(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "WhichOneof"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "record"
    )


def test_only_brook_metadata_dispatches_on_the_kind_of_a_metadata_record() -> None:
    offenders = sorted(
        f"{name}:{node.lineno}"
        for name, path in _modules().items()
        if name != METADATA_PACKAGE and not name.startswith(METADATA_PACKAGE + ".")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if _dispatches_on_record_kind(node)
    )
    assert offenders == [], f"WhichOneof('record') outside {METADATA_PACKAGE}: {offenders}"


def test_the_check_sees_the_image_dispatcher() -> None:
    """Guards the check itself: it finds the one dispatcher there is."""
    path = _modules()[f"{METADATA_PACKAGE}.image"]
    assert any(_dispatches_on_record_kind(n) for n in ast.walk(ast.parse(path.read_text())))
