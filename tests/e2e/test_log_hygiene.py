"""What a client sends cannot shape the server's log: a field name holding a newline
and a forged log line, or ANSI escapes, stays inside its own warning line; a body of
many long unknown fields names a bounded few of them."""

from __future__ import annotations

import uuid

FORGED = "ERROR mlxcel: forged"


def _lines_with(server, marker: str) -> list[str]:
    return [line for line in server.log().splitlines() if marker in line]


def test_a_field_name_cannot_forge_a_log_line(http, server):
    marker = uuid.uuid4().hex[:8]
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, f"{marker}\n{FORGED}\x1b[2J": 1}
    assert http.post("/v1/chat/completions", json=body).status_code == 200
    lines = _lines_with(server, marker)
    assert len(lines) == 1 and "accepted but ignored fields" in lines[0], lines
    assert lines[0].endswith(f"{marker}\\n{FORGED}\\x1b[2J")
    assert not any(line.startswith(FORGED) for line in server.log().splitlines())


def test_many_long_unknown_fields_make_a_short_warning(http, server):
    marker = uuid.uuid4().hex[:8]
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            **{f"{marker}{i:05d}{'x' * 200}": 1 for i in range(2000)}}
    assert http.post("/v1/chat/completions", json=body).status_code == 200
    lines = _lines_with(server, marker)
    assert len(lines) == 1 and lines[0].endswith(" and 1984 more"), lines[0][-200:]
    assert len(lines[0]) < 2000
