"""The YAML of a --config file: safe_load, except that a key written twice in one
mapping is an error (YAML would silently keep the last one, hiding a typo)."""

from __future__ import annotations

from typing import Any

import yaml

from mlxcel.fleet.config_values import Checker

MERGE_TAG = "tag:yaml.org,2002:merge"


def parse_yaml(text: str, check: Checker) -> Any:
    """safe_load, refusing a key written twice in one mapping (YAML would keep the last)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        duplicate = _duplicate(node, "", set()) if node is not None else None
        if duplicate is not None:
            check.fail(duplicate[0], f"duplicate key (line {duplicate[1]}); YAML would keep only the last one")
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def _duplicate(node: yaml.Node, path: str, visited: set[int]) -> tuple[str, int] | None:
    if id(node) in visited:  # an alias: checked where it was defined
        return None
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != MERGE_TAG:
                if name in seen:
                    return f"{path}{name}", key_node.start_mark.line + 1
                seen.add(name)
            found = _duplicate(value_node, f"{path}{name}.", visited)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _duplicate(item, f"{path.rstrip('.')}[{i}].", visited)
            if found:
                return found
    return None
