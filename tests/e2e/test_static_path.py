"""llama-server's --path: a folder's files served beside the API; nothing outside it."""

from __future__ import annotations

import pytest

from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def static(tmp_path_factory):
    root = tmp_path_factory.mktemp("static")
    site = root / "site"
    (site / "docs").mkdir(parents=True)
    (site / "index.html").write_text("<h1>home</h1>")
    (site / "app.js").write_text("console.log('hi')")
    (site / "docs" / "index.html").write_text("<h1>docs</h1>")
    (root / "secret.txt").write_text("outside the folder")
    (site / "leak.txt").symlink_to(root / "secret.txt")
    proc = ServerProcess("-c", "512", "-np", "1", "--path", str(site))
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_files_are_served_and_the_api_stays(static):
    with static.client() as client:
        home, script, docs = client.get("/"), client.get("/app.js"), client.get("/docs/")
        models = client.get("/v1/models")
        head = client.head("/app.js")
        posted = client.post("/", json={})
    assert home.status_code == 200 and home.text == "<h1>home</h1>"
    assert home.headers["content-type"].startswith("text/html")
    assert script.text == "console.log('hi')" and "javascript" in script.headers["content-type"]
    assert docs.text == "<h1>docs</h1>"
    assert models.status_code == 200 and models.json()["data"]
    assert head.status_code == 200 and head.content == b""
    assert posted.status_code != 200 or "home" not in posted.text  # only GET and HEAD read files


@pytest.mark.parametrize("path", ["/../secret.txt", "/%2e%2e/secret.txt", "/leak.txt", "/docs/../../secret.txt",
                                  "/missing.css", "/app.js%00.html"])
def test_nothing_outside_the_folder_is_served(static, path):
    with static.client() as client:
        answer = client.get(path)
    assert answer.status_code == 404 and "outside the folder" not in answer.text


@pytest.mark.parametrize("header", ["bytes=5-2", "garbage", "bytes=100-200", "items=0-1"])
def test_a_range_it_cannot_serve_is_a_416_in_the_error_format(static, header):
    with static.client() as client:
        answer = client.get("/app.js", headers={"Range": header})
        part = client.get("/app.js", headers={"Range": "bytes=0-6"})
    assert answer.status_code == 416 and answer.headers["content-range"] == "bytes */17"
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert part.status_code == 206 and part.text == "console"
