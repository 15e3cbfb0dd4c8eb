"""The chat web UI: served at / to browsers only, and used for real in Debian's
Chromium (driven by Playwright) against the shared SmolLM2 server: a streamed chat that
survives a reload, regenerating and editing, Stop freeing the slot, markdown that
cannot carry markup, and a server behind an API key and a path prefix."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.e2e.test_reasoning import think  # noqa: F401 - the think-template server fixture
from tests.fixtures.mcp_http import SESSION, McpHttpServer
from tests.server_process import ServerProcess

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
REPLY_DONE = ".message.assistant:not(.pending) .stats"
# llama-server's UI setting names; keys this UI does not have are ignored
UI_SETTINGS = {"systemMessage": "Answer in one word.", "temperature": 0, "max_tokens": 5, "theme": "dark"}


@pytest.fixture(scope="module")
def browser():
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    assert executable, "Chromium is not installed (make test installs Debian's chromium package)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()
    assert errors == []  # the page's script never threw


def _settings(page, **fields):
    page.click("#open-settings")
    for name, value in fields.items():
        page.fill(f"#settings-form [name={name}]", str(value))
    page.click("#save-settings")


def test_browsers_get_the_page_and_api_clients_the_health_answer(http):
    page = http.get("/", headers={"Accept": BROWSER_ACCEPT})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'src="./webui/app.js"' in page.text  # relative: the page works behind a proxy's path
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    assert http.get("/").json()["status"] == "ok"  # */* (curl, SDKs): the spec's health alias
    assert http.get("/", headers={"Accept": "application/json"}).json()["status"] == "ok"
    assert http.get("/", headers={"Accept": "application/json, text/html"}).json()["status"] == "ok"
    head = http.head("/", headers={"Accept": BROWSER_ACCEPT})
    assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) == len(page.content)
    script = http.get("/webui/app.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert http.get("/webui/app.css").headers["content-type"].startswith("text/css")
    assert http.get("/webui/math.js").headers["content-type"].startswith("text/javascript")
    assert http.get("/webui/other.js").status_code == 404
    assert http.get("/index.html").content == page.content  # llama-server's other path to its page
    assert http.post("/", headers={"Accept": BROWSER_ACCEPT}).status_code in (404, 405)


def test_a_chat_streams_survives_a_reload_and_can_be_regenerated_and_edited(server, page):
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    expect(page.locator("#tools-toggle")).to_be_hidden()  # a server without --tools
    _settings(page, max_tokens=24, temperature=0, seed=1)
    page.fill("#prompt", "Write a long poem about the sea.")
    page.press("#prompt", "Enter")
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    first = page.locator(".message.assistant .bubble").inner_text()
    assert first.strip()
    assert "24 tokens" in page.locator(".message.assistant .stats").inner_text()  # max_tokens reached the server
    expect(page.locator(".conversation .open")).to_have_text(["Write a long poem about the sea."])

    page.reload()
    expect(page.locator(".message")).to_have_count(2)
    assert page.locator(".message.assistant .bubble").inner_text() == first
    expect(page.locator("#model option")).to_have_count(1)

    page.click(".message.assistant button:has-text('Regenerate')")
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    expect(page.locator(".message")).to_have_count(2)
    assert page.locator(".message.assistant .bubble").inner_text() == first  # temperature 0 and the same seed

    page.click(".message.user button:has-text('Edit')")
    page.fill(".message.user .edit textarea", "Write a long story about a cat.")
    page.click(".message.user .edit button:has-text('Send')")
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    expect(page.locator(".message.user .bubble")).to_have_text("Write a long story about a cat.")
    assert page.locator(".message.assistant .bubble").inner_text() != first

    page.click("#new-chat")
    expect(page.locator(".message")).to_have_count(0)
    expect(page.locator(".conversation")).to_have_count(2)


def test_stop_ends_the_generation_and_frees_its_slot(server, http, page):
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    _settings(page, max_tokens=900, temperature=0)  # greedy: 600+ tokens, never an early end
    page.fill("#prompt", "Write a very long story about a lighthouse keeper.")
    page.press("#prompt", "Enter")
    expect(page.locator(".message.assistant.pending .bubble")).not_to_have_text("", timeout=60_000)
    # screen readers announce the reply once it settles, not at every frame
    expect(page.locator("#messages")).to_have_attribute("aria-busy", "true")
    page.click("#stop")
    expect(page.locator(".message.assistant .tools")).to_contain_text("stopped")
    expect(page.locator("#send")).to_be_visible()
    expect(page.locator("#messages")).to_have_attribute("aria-busy", "false")
    deadline = time.monotonic() + 10
    while any(slot["is_processing"] for slot in http.get("/slots").json()):
        assert time.monotonic() < deadline, "the stopped generation still holds its slot"
        time.sleep(0.1)


def test_a_connection_lost_is_said_in_words(server, page):
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    page.route("**/v1/chat/completions", lambda route: route.abort("connectionreset"))
    page.fill("#prompt", "Hi")
    page.press("#prompt", "Enter")
    expect(page.locator(".message.assistant .tools .error")).to_contain_text("the connection to the server was lost")
    expect(page.locator("#send")).to_be_visible()


def test_a_reply_streaming_leaves_the_messages_above_it_in_place(server, page):
    """A new turn and each frame of its stream put in only the views that changed: the
    messages above keep their elements, so a text selected in one (to copy it) stays
    selected (all of them were taken out and put back every frame), and a long
    conversation is not rendered again whole for each message sent."""
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    _settings(page, max_tokens=200, temperature=0)
    page.fill("#prompt", "Say hi")
    page.press("#prompt", "Enter")
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    page.evaluate("""() => {
        const first = document.querySelector('.message.user');
        window.taken = 0;
        new MutationObserver((records) => {
            for (const r of records) window.taken += [...r.removedNodes].filter((n) => n === first).length;
        }).observe(document.getElementById('messages'), {childList: true});
    }""")
    page.fill("#prompt", "Write a long poem about the sea.")
    page.press("#prompt", "Enter")
    expect(page.locator(".message.assistant.pending .bubble")).not_to_have_text("", timeout=60_000)
    page.evaluate("getSelection().selectAllChildren(document.querySelector('.message.user .bubble'))")
    expect(page.locator(REPLY_DONE)).to_have_count(2, timeout=60_000)
    assert page.evaluate("window.taken") == 0
    assert page.evaluate("getSelection().toString()") == "Say hi"


def test_markdown_is_built_as_elements_and_model_markup_stays_text(server, page):
    page.goto(server.base_url + "/")
    rendered = page.evaluate("""() => {
        const box = document.createElement('div');
        box.append(window.mlxcel.renderMarkdown([
            '## Title', '', 'Some **bold**, *em* and `code` with <img src=x onerror="window.pwned=1">.',
            '', '- one', '- two', '', '1. first', '2. second', '',
            '| a | b |', '|---|---|', '| 1 | 2 |', '',
            '[site](https://example.com) [bad](javascript:window.pwned=2)', '',
            '```html', '<script>window.pwned=3</script>', '```', '> quoted <b>x</b>',
        ].join('\\n')));
        document.body.append(box);
        return {
            tags: [...box.querySelectorAll('*')].map(e => e.tagName.toLowerCase()),
            links: [...box.querySelectorAll('a')].map(a => a.getAttribute('href')),
            code: box.querySelector('pre code').textContent,
            text: box.textContent,
            pwned: window.pwned === undefined ? null : window.pwned,
        };
    }""")
    tags = rendered["tags"]
    for tag in ("h4", "strong", "em", "code", "ul", "ol", "li", "table", "th", "td", "pre", "blockquote", "a"):
        assert tag in tags, (tag, tags)
    assert "img" not in tags and "script" not in tags and "b" not in tags
    assert rendered["links"] == ["https://example.com/"]
    assert rendered["code"] == "<script>window.pwned=3</script>"
    assert '<img src=x onerror="window.pwned=1">' in rendered["text"]
    assert rendered["pwned"] is None


def test_deeply_nested_quotes_render_without_exhausting_the_stack(server, page):
    """Quotes in quotes nest as elements up to a depth; deeper '>' stay text (thousands
    of them from a model once overflowed the stack, and a stored reply so made broke
    every later load of the page)."""
    page.goto(server.base_url + "/")
    nested = page.evaluate("""() => {
        const box = document.createElement('div');
        box.append(window.mlxcel.renderMarkdown('>'.repeat(20000) + ' deep'));
        let depth = 0;
        for (let q = box.querySelector('blockquote'); q; q = q.querySelector(':scope > blockquote')) depth += 1;
        return {depth, text: box.textContent};
    }""")
    assert nested["depth"] == 17 and nested["text"].endswith(">" * 100 + " deep")


def test_a_stream_read_no_further_is_cancelled(server, page):
    """However the page stops reading a reply's events (a payload that is not JSON, the
    reader leaving the loop at an error event), the response is cancelled, so the server
    stops generating for it instead of streaming to the end to no one."""
    page.goto(server.base_url + "/")
    cancelled = page.evaluate("""async () => {
        const cancelledAfter = async (payload, read) => {
            let cancelled = false;
            const body = new ReadableStream({
                start(controller) { controller.enqueue(new TextEncoder().encode(payload)); },  // and no end
                cancel() { cancelled = true; },
            });
            try { await read(window.mlxcel.events(new Response(body))); } catch (error) { /* the bad payload */ }
            for (let i = 0; i < 50 && !cancelled; i++) await new Promise((r) => setTimeout(r, 10));
            return cancelled;
        };
        return [
            await cancelledAfter('data: {not json\\n\\n', (events) => events.next()),
            await cancelledAfter('data: {"error": {"message": "x"}}\\n\\n', async (events) => {
                for await (const event of events) if (event.error) break;
            }),
        ];
    }""")
    assert cancelled == [True, True]


def test_a_long_line_of_unclosed_marks_renders_in_time_linear_in_its_length(server, page):
    """An opening mark (_, **, ~~, \\(, [) with no close is given up a bounded way on, not
    at the end of the line: a 400 KB line full of them (a degenerate reply) renders in
    about a second here, where it took some 25 s (every mark scanned the rest of the line,
    and a streaming reply is rendered again every frame)."""
    page.goto(server.base_url + "/")
    rendered = page.evaluate("""() => {
        const line = 'a_b **c ~~d \\\\(e [f '.repeat(22000);
        const started = performance.now();
        const text = window.mlxcel.renderMarkdown(line).textContent;
        return {ms: performance.now() - started, kept: text === line, length: line.length};
    }""")
    assert rendered["kept"] and rendered["length"] > 400_000
    assert rendered["ms"] < 5000, rendered


MATH_CASES = {
    "inline": ("Euler: $e^{i\\pi} + 1 = 0$.", "math:not([display]) msup"),
    "display": ("$$\\frac{a}{b}$$", "div.math-block math[display=block] mfrac"),
    "matrix": ("$$\n\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}\n$$", "mtable > mtr:nth-child(2) > mtd + mtd"),
    "parens": ("where \\(x_1 \\le \\sqrt[3]{y}\\) holds", "math msub + mo + mroot"),
    "sum": ("$$\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}$$", "munderover > mo"),
    "cases": ("$$f(x) = \\begin{cases} 0 & x < 0 \\\\ x & \\text{otherwise} \\end{cases}$$", "mtable mtext"),
    "two inline": ("$a$ and $$b$$ in a line", "p > math + math"),
}


def test_tex_math_becomes_mathml_and_the_rest_stays_text(server, page):
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    render = """(text) => {
        document.getElementById('math-case')?.remove();  // the page's own elements stay: its script uses them
        const box = document.createElement('div');
        box.id = 'math-case';
        box.append(window.mlxcel.renderMarkdown(text));
        document.body.append(box);
        return {maths: box.querySelectorAll('math').length, text: box.textContent,
                tags: [...box.querySelectorAll('*')].map(e => e.tagName.toLowerCase()),
                source: [...box.querySelectorAll('code.math-source')].map(c => c.textContent)};
    }"""
    for name, (text, selector) in MATH_CASES.items():
        page.evaluate(render, text)
        assert page.locator("#math-case " + selector).count() >= 1, name
    page.evaluate(render, "$\\mathbf{v} + w$ and $\\textbf{T}$")  # bold by a class: the CSP refuses style attributes
    weights = page.evaluate("""() => [...document.querySelectorAll('#math-case mi, #math-case mtext')]
        .map((n) => n.textContent + ':' + getComputedStyle(n).fontWeight)""")
    assert weights == ["v:700", "w:400", "T:700"]
    plain = page.evaluate(render, "It costs $5 and $10, and `$x$` is code.")
    assert plain["maths"] == 0 and "$5 and $10" in plain["text"] and "code" in plain["tags"]
    broken = page.evaluate(render, "$\\frac{a}$ and $" + "{" * 100 + "x$")
    assert broken["maths"] == 0 and broken["source"] == ["$\\frac{a}$", "$" + "{" * 100 + "x$"]
    hostile = page.evaluate(render, "$\\text{<img src=x onerror=\"window.pwned=1\">} \\href{javascript:1}$")
    assert "img" not in hostile["tags"] and "a" not in hostile["tags"] and hostile["maths"] == 1
    assert '<img src=x onerror="window.pwned=1">' in hostile["text"]
    assert page.evaluate("window.pwned === undefined")


@pytest.fixture(scope="module")
def secured():
    proc = ServerProcess("-c", "1024", "-np", "1", "--api-key", "sesame", "--api-prefix", "/llm",
                         "--webui-config", json.dumps(UI_SETTINGS))
    try:
        yield proc.wait_ready(health_path="/llm/health")
    finally:
        proc.stop()


def test_behind_an_api_key_and_a_prefix_the_page_asks_for_the_key(secured, page):
    """...and takes the server's --webui-config as its defaults, under the user's own settings."""
    with httpx.Client(base_url=secured.base_url) as client:
        assert client.get("/llm/webui/app.js").status_code == 200  # the page's own files need no key
        assert client.get("/llm/webui/math.js").status_code == 200
        assert client.get("/llm/sw.js").status_code == 200  # a worker's update check carries no key
        assert client.get("/llm/v1/models").status_code == 401
        props = client.get("/llm/props", headers={"Authorization": "Bearer sesame"}).json()
        assert props["ui"] is True and props["ui_settings"] == UI_SETTINGS
    page.goto(secured.base_url + "/llm/")
    expect(page.locator("#settings")).to_be_visible()  # /v1/models answered 401: the key is asked for
    expect(page.locator("#notice")).to_contain_text("API key")
    held = []  # /props held back: a message sent before it comes still carries the server's defaults
    page.route("**/llm/props*", lambda route: held.append(route))
    page.fill("#settings-form [name=api_key]", "sesame")
    page.click("#save-settings")
    expect(page.locator("#model option")).to_have_count(1)
    with page.expect_request("**/llm/v1/chat/completions") as sent:
        page.fill("#prompt", "Hi")
        page.press("#prompt", "Enter")
        page.wait_for_timeout(300)
        assert held
        for route in held:
            route.continue_()
        page.unroute("**/llm/props*")
    body = sent.value.post_data_json
    assert body["messages"][0] == {"role": "system", "content": "Answer in one word."}
    assert (body["temperature"], body["max_tokens"]) == (0, 5)
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)

    page.click("#open-settings")  # the server's defaults show in the empty fields
    assert page.get_attribute("#settings-form [name=max_tokens]", "placeholder") == "server: 5"
    assert page.input_value("#settings-form [name=max_tokens]") == ""
    page.fill("#settings-form [name=max_tokens]", "8")  # the user's own value wins
    page.click("#save-settings")
    page.click("#new-chat")
    with page.expect_request("**/llm/v1/chat/completions") as sent:
        page.fill("#prompt", "Hi")
        page.press("#prompt", "Enter")
    assert (sent.value.post_data_json["max_tokens"], sent.value.post_data_json["temperature"]) == (8, 0)
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    assert "8 tokens" in page.locator(".stats").inner_text()


def test_behind_a_reverse_proxy_under_a_path_of_its_own_the_page_works(server, page):
    """A reverse proxy serving this server under /chat/ (it strips the path; no
    --api-prefix): the page's files and its API calls are relative to the page, so they
    go through the proxy too (they were absolute, /webui/app.js: a blank page)."""
    def proxy(route):
        path = route.request.url[len(server.base_url):]
        if not path.startswith("/chat/"):
            route.fulfill(status=404, body="not behind the proxy: " + path)
            return
        route.fulfill(response=route.fetch(url=server.base_url + path[len("/chat"):]))

    page.route(server.base_url + "/**", proxy)
    page.goto(server.base_url + "/chat/")
    expect(page.locator("#model option")).to_have_count(1)
    _settings(page, max_tokens=4, temperature=0)
    page.fill("#prompt", "Hi")
    page.press("#prompt", "Enter")
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    assert "4 tokens" in page.locator(".stats").inner_text()


def test_no_webui_serves_the_health_answer_to_browsers_too():
    proc = ServerProcess("-c", "512", "-np", "1", "--no-webui")
    try:
        proc.wait_ready()
        with proc.client() as client:
            answer = client.get("/", headers={"Accept": BROWSER_ACCEPT})
            assert answer.json()["status"] == "ok"
            assert client.get("/webui/app.js").status_code == 404
            worker = client.get("/sw.js")  # a service worker left at this address still finds its end
            assert worker.status_code == 200 and "unregister()" in worker.text
    finally:
        proc.stop()


def test_a_service_worker_left_at_this_address_removes_itself(server, page):
    """llama-server's UI registers a service worker at /sw.js that goes on showing that UI
    from its cache; here its update check gets a worker that unregisters itself at once
    (there was no /sw.js: the update failed and the old worker stayed)."""
    page.goto(server.base_url + "/")
    left = page.evaluate("""async () => {
        await navigator.serviceWorker.register('/sw.js');
        for (let i = 0; i < 200 && (await navigator.serviceWorker.getRegistrations()).length; i += 1) {
            await new Promise((resolve) => setTimeout(resolve, 50));
        }
        return (await navigator.serviceWorker.getRegistrations()).length;
    }""")
    assert left == 0


def test_thoughts_are_shown_apart_from_the_answer(think, page):  # noqa: F811 - the imported fixture
    """A reasoning model's thoughts (here a random-weight model under a template that
    opens <think>) come folded in their own block, not in the answer."""
    page.goto(think.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    _settings(page, max_tokens=12, temperature=1, seed=7, top_k=0, top_p=1, min_p=0)
    page.fill("#prompt", "Hello there")
    page.press("#prompt", "Enter")
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    thoughts = page.locator(".message.assistant details.reasoning")
    expect(thoughts).to_have_count(1)
    expect(thoughts.locator("summary")).to_have_text("Thoughts")
    assert thoughts.evaluate("d => d.textContent.length") > len("Thoughts")
    answer = page.locator(".message.assistant .bubble").evaluate(
        "b => [...b.childNodes].filter(n => n.tagName !== 'DETAILS').map(n => n.textContent).join('')")
    assert answer == ""


def test_a_text_file_goes_with_the_message_and_esc_stops(server, http, page, tmp_path):
    """Any model takes text files: the file's text goes inside the message (what the
    server receives shows it); images are refused for a model without vision. Esc stops."""
    notes = tmp_path / "notes.md"
    notes.write_text("The secret word is periwinkle.\n")
    picture = tmp_path / "dot.png"
    picture.write_bytes(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                                      "1f15c4890000000d49444154789c6300010000050001"
                                      "0d0a2db40000000049454e44ae426082"))
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    _settings(page, max_tokens=600, temperature=0)  # greedy: this prompt runs to max_tokens
    page.set_input_files("#attach", [str(picture)])
    expect(page.locator("#notice")).to_contain_text("no images")
    page.set_input_files("#attach", [str(notes)])
    expect(page.locator("#attachments .file")).to_have_text(["notes.md"])
    expect(page.get_by_role("button", name="Remove notes.md")).to_have_count(1)  # its × says what it does
    with page.expect_request("**/v1/chat/completions") as sent:
        page.fill("#prompt", "Write a very long story about a lighthouse keeper.")
        page.press("#prompt", "Enter")
    body = sent.value.post_data_json
    assert body["messages"][-1] == {"role": "user", "content": "Write a very long story about a lighthouse keeper."
                                    "\n\nFile notes.md:\nThe secret word is periwinkle.\n"}
    expect(page.locator("#attachments .file")).to_have_count(0)  # sent with this message, not the next
    expect(page.locator(".message.user .file")).to_have_text(["notes.md"])
    expect(page.locator(".message.assistant.pending .bubble")).not_to_have_text("", timeout=60_000)
    page.keyboard.press("Escape")
    expect(page.locator(".message.assistant .tools")).to_contain_text("stopped")
    deadline = time.monotonic() + 10
    while any(slot["is_processing"] for slot in http.get("/slots").json()):
        assert time.monotonic() < deadline, "the stopped generation still holds its slot"
        time.sleep(0.1)


def test_a_reply_cut_at_the_token_limit_can_be_continued(server, page):
    stored = "() => JSON.parse(localStorage.getItem('mlxcel.conversations'))[0].messages.map(m => m.content)"
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    _settings(page, max_tokens=8, temperature=0)
    page.fill("#prompt", "Write a long poem about the sea.")
    page.press("#prompt", "Enter")
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    expect(page.locator(".message.assistant .tools")).to_contain_text("cut at the token limit")
    first = page.evaluate(stored)[1]
    with page.expect_request("**/v1/chat/completions") as sent:
        page.click(".message.assistant button:has-text('Continue')")
    assert sent.value.post_data_json["messages"][-1] == {"role": "assistant", "content": first}
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    messages = page.evaluate(stored)
    assert len(messages) == 2  # the same reply, continued
    assert messages[1].startswith(first) and len(messages[1]) > len(first)
    assert "8 tokens" in page.locator(".message.assistant .stats").inner_text()  # the continuation's own


@pytest.fixture(scope="module")
def agent():
    """Qwen2.5-Coder (it calls tools) with two of the server's tools and the MCP proxy."""
    proc = ServerProcess("-c", "4096", "-np", "1", "--tools", "read_file,write_file", "--ui-mcp-proxy",
                         model="qwen2.5-coder-0.5b-instruct")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _last_calls_and_results(messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """The last assistant message's tool calls and the tool messages after it."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return messages[last].get("tool_calls") or [], [m for m in messages[last + 1:] if m["role"] == "tool"]


def test_the_model_uses_the_servers_tools_and_write_tools_ask_first(agent, page, tmp_path):
    """Two model turns a message (the "Tool turns" setting): the call, then the answer
    made with the tool's result (a second turn's calls are not run)."""
    secret, out = tmp_path / "secret.txt", tmp_path / "out.txt"
    secret.write_text("The secret word is periwinkle.\n")
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/v1/chat/completions") else None)
    page.goto(agent.base_url + "/")
    expect(page.locator("#tools-toggle")).to_be_visible()
    expect(page.locator("#use-tools")).to_be_checked()
    _settings(page, max_tokens=120, temperature=0, max_tool_turns=2)

    def ask(prompt: str) -> None:
        page.fill("#prompt", prompt)
        page.press("#prompt", "Enter")
        expect(page.locator("#stop")).to_be_hidden(timeout=90_000)  # every turn done

    ask(f"Read the file {secret} and tell me the secret word.")
    # The model may call more than one tool in a turn; each call is answered, and the
    # read_file result reaches it. Two tool turns: exactly two requests.
    expect(page.locator(".message.tool summary", has_text="Result of read_file").first).to_be_visible()
    expect(page.locator(".message.assistant")).to_have_count(2)
    assert len(sent) == 2 and [t["function"]["name"] for t in sent[0]["tools"]] == ["read_file", "write_file"]
    calls, results = _last_calls_and_results(sent[1]["messages"])
    reads = [c["id"] for c in calls if c["function"]["name"] == "read_file"]
    assert reads and [r["tool_call_id"] for r in results] == [c["id"] for c in calls]
    assert any("periwinkle" in r["content"] for r in results if r["tool_call_id"] in reads)

    page.click("#new-chat")
    asked: list[str] = []

    def refuse(dialog):
        asked.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    ask(f"Write the text hello to the file {out}")
    assert asked and all(a.startswith("Allow Write file?") for a in asked) and str(out) in asked[0]
    calls, results = _last_calls_and_results(sent[-1]["messages"])
    assert not out.exists() and len(asked) == sum(c["function"]["name"] == "write_file" for c in calls)
    refused = [r for r, c in zip(results, calls) if c["function"]["name"] == "write_file"]
    assert refused and all(r["content"] == '{"error":"the user did not allow this call"}' for r in refused)

    page.remove_listener("dialog", refuse)
    page.on("dialog", lambda dialog: dialog.accept())
    page.click(".message.assistant:last-child button:has-text('Regenerate')")
    expect(page.locator("#stop")).to_be_visible()
    expect(page.locator("#stop")).to_be_hidden(timeout=90_000)
    expect(page.locator(".message.tool summary", has_text="Result of write_file").first).to_be_visible()
    calls, results = _last_calls_and_results(sent[-1]["messages"])
    assert out.exists() and any("written" in r["content"] for r in results)

    page.uncheck("#use-tools")  # off: the requests carry no tools
    page.click("#new-chat")
    ask("Hi")
    assert "tools" not in sent[-1]


def test_a_remote_mcp_servers_tools_are_reached_through_the_proxy(agent, page):
    """An MCP server over Streamable HTTP that sends no CORS headers: the page reaches it
    through /cors-proxy, with the user's header for it, its session, a paged tool list and
    an answer that comes as an event stream."""
    with McpHttpServer() as mcp:
        sent: list[dict] = []
        page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/v1/chat/completions") else None)
        asked: list[str] = []
        page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.goto(agent.base_url + "/")
        _settings(page, max_tokens=120, temperature=0, max_tool_turns=2,
                  mcp_servers=f"{mcp.url}\nAuthorization: Bearer remote-key")
        expect(page.locator("#tools-count")).to_have_text("(4)")  # the server's two and the MCP server's two
        page.fill("#prompt", "Use the notes_lookup tool to find the secret word of the topic colors.")
        page.press("#prompt", "Enter")
        expect(page.locator("#stop")).to_be_hidden(timeout=90_000)
        expect(page.locator(".message.tool summary", has_text="Result of notes_lookup").first).to_be_visible()
    assert [t["function"]["name"] for t in sent[0]["tools"]] == ["read_file", "write_file", "notes_lookup",
                                                                  "notes_store"]
    calls, results = _last_calls_and_results(sent[1]["messages"])
    looked = [r for r, c in zip(results, calls) if c["function"]["name"] == "notes_lookup"]
    assert looked and looked[0]["content"] == "The secret word is periwinkle." and asked == []  # read-only: not asked
    methods = [r["message"]["method"] for r in mcp.requests]
    assert methods[:4] == ["initialize", "notifications/initialized", "tools/list", "tools/list"]
    assert "tools/call" in methods
    call = next(r["message"]["params"] for r in mcp.requests if r["message"]["method"] == "tools/call")
    assert call["name"] == "lookup" and "topic" in call["arguments"]
    for request in mcp.requests:
        headers = request["headers"]
        assert headers["authorization"] == "Bearer remote-key" and "origin" not in headers and "cookie" not in headers
        assert headers["accept"] == "application/json, text/event-stream"
    assert all(r["headers"].get("mcp-session-id") == SESSION for r in mcp.requests[1:])


def test_mcp_servers_need_the_proxy_and_well_formed_settings(server, page):
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    _settings(page, mcp_servers="https://mcp.example/mcp")
    expect(page.locator("#notice")).to_contain_text("--ui-mcp-proxy")
    expect(page.locator("#tools-toggle")).to_be_hidden()
    _settings(page, mcp_servers="https://mcp.example/mcp\nnot a header line")
    expect(page.locator("#notice")).to_contain_text("MCP servers, line 2")


def test_saved_settings_go_with_the_next_message_and_escape_discards_edits(server, page):
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/v1/chat/completions") else None)
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)

    def ask(prompt: str, answers: int) -> None:
        page.fill("#prompt", prompt)
        page.press("#prompt", "Enter")
        expect(page.locator(".message.assistant")).to_have_count(answers)
        expect(page.locator("#stop")).to_be_hidden(timeout=60_000)

    _settings(page, max_tokens=7, temperature=0)
    ask("Hi", 1)  # sent as soon as Save was clicked
    page.click("#open-settings")
    page.fill("#settings-form [name=max_tokens]", "9")
    page.keyboard.press("Escape")  # closes without saving, after an earlier Save
    expect(page.locator("#settings")).to_be_hidden()
    page.click("#open-settings")
    expect(page.locator("#settings-form [name=max_tokens]")).to_have_value("7")
    page.keyboard.press("Escape")
    ask("Hi again", 2)
    assert [(body["max_tokens"], body["temperature"]) for body in sent] == [(7, 0), (7, 0)]


def test_a_malformed_store_still_loads_the_page(server, page):
    """What localStorage holds is read as an imported file is, field by field: parts that
    another version of the page or a hand edit left malformed are dropped, the rest shows,
    and the page's script runs to the end (it loads the models)."""
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    page.evaluate("""() => {
        localStorage.setItem('mlxcel.settings', 'null');
        localStorage.setItem('mlxcel.current', '"kept"');
        localStorage.setItem('mlxcel.conversations', JSON.stringify([
            null, 'not a conversation', {id: 'no messages', title: 'x'},
            {id: 'kept', title: 'Kept', updated: 2, messages: [
                {role: 'user', content: 'Hello'}, {role: 'assistant', content: 7}, null,
                {role: 'assistant', content: 'Hi there', tool_calls: [{name: 1}], stats: {tokens: 'x'}},
            ]},
        ]));
    }""")
    page.reload()
    expect(page.locator("#model option")).to_have_count(1)
    expect(page.locator(".conversation .open")).to_have_text(["Kept"])
    expect(page.locator(".message .bubble")).to_have_text(["Hello", "Hi there"])
    page.evaluate("localStorage.setItem('mlxcel.conversations', '{\"not\": \"a list\"}')")
    page.reload()
    expect(page.locator("#model option")).to_have_count(1)
    expect(page.locator(".conversation")).to_have_count(0)
    expect(page.locator("#messages .hint")).to_be_visible()


def test_a_change_made_in_another_tab_survives_a_reply_ending_here(server, page, tmp_path):
    """Tabs share the conversations: one imported in a tab while another streams a reply
    shows there at once and is still kept after that reply ends (the streaming tab ignored
    the change, then saved its older list over it, and the other tab took that list)."""
    other = page.context.new_page()
    for tab in (page, other):
        tab.goto(server.base_url + "/")
        expect(tab.locator("#model option")).to_have_count(1)
    _settings(page, max_tokens=400, temperature=0)
    page.fill("#prompt", "Write a very long story about a lighthouse keeper.")
    page.press("#prompt", "Enter")
    expect(page.locator(".message.assistant.pending .bubble")).not_to_have_text("", timeout=60_000)
    archive = tmp_path / "chats.json"
    archive.write_text(json.dumps([{"title": "From the other tab", "messages": [{"role": "user", "content": "Hi"}]}]))
    other.set_input_files("#import", str(archive))
    expect(other.locator("#notice")).to_have_text("1 conversation imported.")
    expect(page.locator(".conversation")).to_have_count(2)
    # the reply ends (its 400 tokens may all come before a Stop could be clicked on a quiet host)
    expect(page.locator("#send")).to_be_visible(timeout=120_000)
    expect(other.locator(".conversation")).to_have_count(2)
    stored = {c["title"]: c for c in page.evaluate("JSON.parse(localStorage.getItem('mlxcel.conversations'))")}
    assert sorted(stored) == ["From the other tab", "Write a very long story about a lighthouse keeper."]
    assert [m["role"] for m in stored["Write a very long story about a lighthouse keeper."]["messages"]] == [
        "user", "assistant"]


def test_conversations_export_and_import_as_data_only(server, page, tmp_path):
    page.goto(server.base_url + "/")
    expect(page.locator("#model option")).to_have_count(1)
    _settings(page, max_tokens=6, temperature=0)
    page.fill("#prompt", "Say hi")
    page.press("#prompt", "Enter")
    expect(page.locator(REPLY_DONE)).to_have_count(1, timeout=60_000)
    with page.expect_download() as download:
        page.click("#export")
    exported = json.loads(Path(download.value.path()).read_text())
    [chat] = exported["conversations"]
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant"] and chat["messages"][0]["content"] == "Say hi"

    hostile = {"conversations": [
        chat,  # the same id again: imported beside it under a new id
        {"id": "x", "title": "<b>bold</b>", "updated": 1, "messages": [
            {"role": "user", "content": "<img src=x onerror=\"window.pwned=1\">", "onclick": "x",
             "images": ["javascript:alert(1)", "data:image/png;base64,iVBORw0KGgo="]},
            {"role": "system", "content": "dropped: not a role this page writes"},
            {"role": "assistant", "content": "[link](javascript:alert(1))", "tool_calls": [{"id": 1}]},
            {"role": "tool", "content": "no call id: dropped"},
        ]},
        "not a conversation",
    ]}
    archive = tmp_path / "chats.json"
    archive.write_text(json.dumps(hostile))
    page.set_input_files("#import", str(archive))
    expect(page.locator("#notice")).to_have_text("2 conversations imported.")
    expect(page.locator(".conversation")).to_have_count(3)
    page.click(".conversation .open:has-text('<b>bold</b>')")  # the title is text
    expect(page.locator(".message")).to_have_count(2)
    expect(page.locator(".message.user .bubble")).to_contain_text('<img src=x onerror="window.pwned=1">')
    assert page.locator(".message.user .bubble img").count() == 1  # only the data: image
    assert page.locator("#messages a").count() == 0 and page.evaluate("window.pwned") is None
    stored = page.evaluate("JSON.parse(localStorage.getItem('mlxcel.conversations'))")
    ids = [c["id"] for c in stored]
    assert len(set(ids)) == 3 and "onclick" not in json.dumps(stored)
