"""The web UI's files as the server sends them: each with an ETag of its body, so a
browser revalidating (no-cache) gets a 304 and no body while its copy is current; `/`
varies with Accept (the page for browsers, the health answer for API clients)."""

from __future__ import annotations

import asyncio

from mlxcel.server.webui import WebUIMiddleware

BROWSER = (b"accept", b"text/html,application/xhtml+xml,*/*;q=0.8")


def _get(path: str, *headers: tuple[bytes, bytes], method: str = "GET") -> tuple[int, dict, bytes]:
    sent: list[dict] = []

    async def behind(scope, receive, send):
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"the API"})

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": list(headers)}
    asyncio.run(WebUIMiddleware(behind)(scope, None, send))
    return sent[0]["status"], dict(sent[0]["headers"]), sent[1]["body"]


def test_a_current_copy_is_answered_304_without_a_body():
    status, headers, body = _get("/webui/app.js")
    tag = headers[b"etag"]
    assert status == 200 and body and tag.startswith(b'"') and headers[b"cache-control"] == b"no-cache"
    for given in (tag, b"W/" + tag, b'"other", ' + tag, b"*"):
        status, again, body = _get("/webui/app.js", (b"if-none-match", given))
        assert (status, body, again[b"etag"]) == (304, b"", tag), given
        assert b"content-length" not in again and b"content-type" not in again
    assert _get("/webui/app.js", (b"if-none-match", b'"other"'))[0] == 200
    assert _get("/webui/math.js", (b"if-none-match", tag))[0] == 200  # another file, another tag
    assert _get("/webui/app.js", (b"if-none-match", tag), method="HEAD")[0] == 304


def test_the_page_at_root_varies_with_accept():
    status, headers, body = _get("/", BROWSER)
    assert status == 200 and body.startswith(b"<!doctype html>") and headers[b"vary"] == b"Accept"
    assert _get("/", BROWSER, (b"if-none-match", headers[b"etag"]))[0] == 304
    assert _get("/", (b"accept", b"*/*"))[0] == 299  # an API client: the route behind answers
    assert b"vary" not in _get("/webui/app.css")[1]
