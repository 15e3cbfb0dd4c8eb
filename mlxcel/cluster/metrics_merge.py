"""One Prometheus exposition from every replica's: each sample gains a `replica`
label, and each metric family stays contiguous under one HELP and TYPE, as the
text format requires."""

from __future__ import annotations

from collections import OrderedDict


def _labelled(sample: str, replica: str) -> str:
    label = f'replica="{replica}"'
    brace, space = sample.find("{"), sample.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        close = sample[brace + 1:brace + 2]
        return f"{sample[:brace + 1]}{label}{'' if close == '}' else ','}{sample[brace + 1:]}"
    return f"{sample[:space]}{{{label}}}{sample[space:]}" if space != -1 else sample


def merge_exposition(texts: dict[str, str]) -> str:
    """`texts`: replica id -> that replica's exposition."""
    families: OrderedDict[str, tuple[list[str], list[str]]] = OrderedDict()
    for replica, text in texts.items():
        family = ""
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    head, _ = families.setdefault(family, ([], []))
                    if not any(h.split(None, 2)[:2] == parts[:2] for h in head):
                        head.append(line)
                continue
            name = line.split("{", 1)[0].split(" ", 1)[0]
            key = family if family and name.startswith(family) else name
            families.setdefault(key, ([], []))[1].append(_labelled(line, replica))
    out = []
    for head, samples in families.values():
        out.extend(head)
        out.extend(samples)
    return "\n".join(out) + "\n"
