"""The package layering stays true: a package imports only packages below it, so
there are no upward imports and no cycles between packages, and nothing below the
HTTP edge imports FastAPI or Starlette."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mlxcel"

# lowest first; a package may import its own modules and those of earlier layers
LAYERS = [
    {"models"},
    {"engine"},
    {"config"},
    {"state"},
    {"media"},
    {"structured"},
    {"chat"},
    {"turn"},
    {"speech"},
    {"toolbox"},
    {"fleet"},
    {"http"},
    {"api"},
    {"observability"},
    {"server"},
    {"cluster"},
    {"cli", "__main__"},
]
HTTP_FREE = {"engine", "models", "config", "state", "media", "structured", "chat", "turn", "speech", "toolbox",
             "fleet"}
HTTP_MODULES = ("fastapi", "starlette", "uvicorn")


def _layer_of(package: str) -> int:
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    raise AssertionError(f"mlxcel.{package} is in no layer: add it to LAYERS")


def _top_package(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py") if len(relative.parts) > 1 or relative.name != "__init__.py" else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if _top_package(p))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path):
    own = _top_package(path)
    level = _layer_of(own)
    for line, module in _imports(path):
        parts = module.split(".")
        if parts[0] == "mlxcel" and len(parts) > 1 and parts[1] != own:
            assert _layer_of(parts[1]) <= level, f"{path.name}:{line} imports {module}: an upward import"
        if own in HTTP_FREE:
            assert parts[0] not in HTTP_MODULES, f"{path.name}:{line} imports {module} below the HTTP edge"


def test_no_package_is_left_out():
    packages = {_top_package(p) for p in _modules()}
    assert packages <= set().union(*LAYERS)


@pytest.mark.parametrize("path", sorted((PACKAGE / "api").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_apis_do_not_import_each_other(path: Path):
    """Each API sub-package stands alone on the layers below (what two share lives there)."""
    relative = path.relative_to(PACKAGE / "api").parts
    own = relative[0] if len(relative) > 1 else None
    for line, module in _imports(path):
        parts = module.split(".")
        if parts[:2] == ["mlxcel", "api"] and len(parts) > 2:
            assert parts[2] == own, f"api/{'/'.join(relative)}:{line} imports {module}, another API"
