// mlxcel's chat page: conversations kept in this browser's localStorage, replies streamed
// from the server's own /v1/chat/completions. Model output is only ever put into the page
// as text nodes (markdown is parsed into elements here, never into HTML strings).
"use strict";

(() => {
  const PREFIX = document.querySelector('meta[name="mlxcel-prefix"]').content;
  const SAMPLING = ["temperature", "top_p", "top_k", "min_p", "max_tokens", "seed"];
  // the server's defaults (--webui-config, /props ui_settings) under llama-server's UI names or ours
  const SERVER_SETTINGS = {systemMessage: "system", system: "system", agenticMaxTurns: "max_tool_turns",
    max_tool_turns: "max_tool_turns", ...Object.fromEntries(SAMPLING.map((key) => [key, key]))};
  const MAX_IMAGE_BYTES = 8 * 1024 * 1024;
  const MAX_TEXT_BYTES = 1024 * 1024;
  const MAX_TOOL_TURNS = 20;  // model turns one message may take with tools (default; "Tool turns" setting)
  const TOOL_RESULT_CHARS = 64 * 1024;  // of a tool's answer kept for the model
  const $ = (id) => document.getElementById(id);

  // --- storage --------------------------------------------------------------

  const store = {
    load(key, fallback) {
      try {
        const value = localStorage.getItem("mlxcel." + key);
        return value === null ? fallback : JSON.parse(value);
      } catch {
        return fallback;
      }
    },
    save(key, value) {
      try {
        localStorage.setItem("mlxcel." + key, JSON.stringify(value));
      } catch (error) {
        notice("This browser did not keep the conversation: " + error.message);
      }
    },
  };

  // --- conversations as data -------------------------------------------------
  // What localStorage or an imported file holds is taken field by field: only the fields
  // this page writes, each of its type. A corrupted store (another version of the page, a
  // hand edit) or a hostile file can neither break the page nor carry markup.

  const ROLES = new Set(["user", "assistant", "tool"]);
  const isText = (v) => typeof v === "string";
  const isNumber = (v) => typeof v === "number" && Number.isFinite(v);
  const isRecord = (v) => Boolean(v) && typeof v === "object" && !Array.isArray(v);
  const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

  function keptStats(s) {
    if (!isRecord(s) || !isNumber(s.tokens) || !isNumber(s.perSecond)) return null;
    return {tokens: s.tokens, prompt: isNumber(s.prompt) ? s.prompt : 0, perSecond: s.perSecond,
            firstMs: isNumber(s.firstMs) ? s.firstMs : null};
  }

  function keptMessage(m) {
    if (!isRecord(m) || !ROLES.has(m.role) || !isText(m.content)) return null;
    const out = {role: m.role, content: m.content};
    if (m.role === "assistant") {
      out.reasoning = isText(m.reasoning) ? m.reasoning : "";
      if (Array.isArray(m.tool_calls)) {
        out.tool_calls = m.tool_calls.filter((t) => t && isText(t.id) && isText(t.name) && isText(t.arguments))
          .map(({id, name, arguments: args}) => ({id, name, arguments: args}));
      }
      if (m.finish === "length") out.finish = "length";
      if (m.stopped === true) out.stopped = true;
      if (typeof m.showReasoning === "boolean") out.showReasoning = m.showReasoning;
      for (const key of ["error", "halted"]) if (isText(m[key]) && m[key]) out[key] = m[key];
      const stats = keptStats(m.stats);
      if (stats) out.stats = stats;
    }
    if (m.role === "tool") {
      if (!isText(m.tool_call_id) || !isText(m.name)) return null;
      Object.assign(out, {tool_call_id: m.tool_call_id, name: m.name});
    }
    if (m.role === "user" && Array.isArray(m.files)) {
      out.files = m.files.filter((f) => f && isText(f.name) && isText(f.text)).map(({name, text}) => ({name, text}));
    }
    if (m.role === "user" && Array.isArray(m.images)) {
      out.images = m.images.filter((u) => isText(u) && u.startsWith("data:image/"));
    }
    return out;
  }

  // the conversations in `given`, each message kept as above; an id already in `known` gets a new one
  function keptConversations(given, known = new Set(), untitled = "New chat") {
    const out = [];
    for (const c of Array.isArray(given) ? given : []) {
      if (!isRecord(c) || !Array.isArray(c.messages)) continue;
      const id = isText(c.id) && c.id && !known.has(c.id) ? c.id : newId();
      known.add(id);
      out.push({id, title: isText(c.title) && c.title.trim() ? c.title.slice(0, 200) : untitled,
                messages: c.messages.map(keptMessage).filter(Boolean),
                updated: isNumber(c.updated) ? c.updated : Date.now(), model: isText(c.model) ? c.model : ""});
    }
    return out;
  }

  const state = {
    conversations: keptConversations(store.load("conversations", [])),
    current: store.load("current", null),
    settings: ((given) => isRecord(given) ? given : {})(store.load("settings", {})),
    serverSettings: {},  // defaults the server gives the UI; the user's own settings win
    propsLoaded: Promise.resolve(),  // the latest /props read (loadProps)
    // the model's tools: the server's (GET /tools, --tools) and remote MCP servers' (Settings:
    // MCP servers, through --ui-mcp-proxy), each {tool, display_name, permissions, definition},
    // a remote one with its own `run(args, signal)`
    tools: [],
    corsProxy: false,  // /props cors_proxy_enabled: remote MCP servers can be reached
    models: [],
    vision: false,
    controller: null,  // the running generation's AbortController
    attachments: [],  // the next message's files: {name, url} images and {name, text} text files
  };

  const conversation = () => state.conversations.find((c) => c.id === state.current) || null;
  const saveConversations = () => {
    store.save("conversations", state.conversations);
    store.save("current", state.current);
  };

  // --- markdown (to elements, never to HTML strings) -------------------------

  const el = (tag, attrs = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    for (const child of children) node.append(child);
    return node;
  };

  // Each span is bounded (1,000 characters; math 4,000, as math.js takes): an opening mark
  // with no close is given up after that many, not at the end of the line, so a long line
  // full of unclosed marks ("a_b a_b ...") costs time in its length, not its square.
  const INLINE = /(`+)([^`]|[^`][\s\S]{0,1000}?[^`])\1(?!`)|\*\*(?=\S)([\s\S]{0,1000}?\S)\*\*|__(?=\S)([\s\S]{0,1000}?\S)__|\*(?=[^\s*])([\s\S]{0,1000}?[^\s*])\*|_(?=[^\s_])([\s\S]{0,1000}?[^\s_])_(?![A-Za-z0-9])|~~(?=\S)([\s\S]{0,1000}?\S)~~|\[([^\]\n]{1,1000})\]\(([^)\s]{1,4000})\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])|\$\$([^$]{1,4000}?)\$\$|\\\(([\s\S]{1,4000}?)\\\)|\\\[([\s\S]{1,4000}?)\\\]|\$(?=[^\s$])([^$\n`]*?[^\s$\\`])\$(?![0-9])/;

  // TeX math (math.js) as MathML; its source as text if math.js is missing
  const mathView = (source, display) => window.mlxcelMath?.render(source, display)
    ?? document.createTextNode(display ? "$$" + source + "$$" : "$" + source + "$");
  const MATH_OPEN = /^\s{0,3}(\$\$|\\\[)/;

  // "$$" or "\\[" when `line` opens display math: alone, or closed at its own end (a line
  // with text after a closed formula is a paragraph, its math inline)
  function displayMath(line) {
    const opened = MATH_OPEN.exec(line);
    if (!opened) return null;
    const close = opened[1] === "$$" ? "$$" : "\\]";
    const rest = line.trim().slice(2).trimEnd();
    const at = rest.indexOf(close);
    return at < 0 || at === rest.length - 2 ? opened[1] : null;
  }

  function safeHref(url) {
    try {
      const parsed = new URL(url, location.href);
      return parsed.protocol === "http:" || parsed.protocol === "https:" || parsed.protocol === "mailto:"
        ? parsed.href : null;
    } catch {
      return null;
    }
  }

  function link(text, url) {
    const href = safeHref(url);
    if (href === null) return document.createTextNode(text);
    return el("a", {href, target: "_blank", rel: "noopener noreferrer"}, text);
  }

  function inline(text) {
    const out = [];
    let rest = text;
    while (rest) {
      const m = INLINE.exec(rest);
      if (!m) {
        out.push(document.createTextNode(rest));
        break;
      }
      if (m.index) out.push(document.createTextNode(rest.slice(0, m.index)));
      if (m[1]) out.push(el("code", {}, m[2]));
      else if (m[3] !== undefined || m[4] !== undefined) out.push(el("strong", {}, ...inline(m[3] ?? m[4])));
      else if (m[5] !== undefined || m[6] !== undefined) out.push(el("em", {}, ...inline(m[5] ?? m[6])));
      else if (m[7] !== undefined) out.push(el("del", {}, ...inline(m[7])));
      else if (m[8] !== undefined) out.push(link(m[8], m[9]));
      else if (m[10] !== undefined) out.push(link(m[10], m[10]));
      else if (m[11] !== undefined || m[13] !== undefined) out.push(mathView(m[11] ?? m[13], true));
      else out.push(mathView(m[12] ?? m[14], false));
      rest = rest.slice(m.index + m[0].length);
    }
    return out;
  }

  function withBreaks(lines) {
    const nodes = [];
    lines.forEach((line, i) => {
      if (i) nodes.push(el("br"));
      nodes.push(...inline(line));
    });
    return nodes;
  }

  function codeBlock(code, language) {
    const attrs = language ? {"data-language": language} : {};
    const copy = el("button", {type: "button", class: "copy-code"}, "Copy");
    copy.addEventListener("click", () => copyText(code, copy));
    return el("pre", {}, copy, el("code", attrs, code));
  }

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const LIST_ITEM = /^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const TABLE_RULE = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

  function tableRow(line, cell) {
    const cells = line.trim().replace(/^\||\|$/g, "").split("|");
    return el("tr", {}, ...cells.map((c) => el(cell, {}, ...inline(c.trim()))));
  }

  const MAX_QUOTE_DEPTH = 16;  // quotes in quotes; deeper '>' are shown as text

  function renderMarkdown(text, depth = 0) {
    const root = document.createDocumentFragment();
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      const fence = FENCE.exec(line);
      if (fence) {
        const body = [];
        i += 1;
        while (i < lines.length && !lines[i].trimStart().startsWith(fence[1])) body.push(lines[i++]);
        i += 1;  // the closing fence (or the end of an unfinished block)
        root.append(codeBlock(body.join("\n"), fence[2]));
        continue;
      }
      if (!line.trim()) {
        i += 1;
        continue;
      }
      const opened = displayMath(line);
      if (opened) {  // display math: $$ … $$ or \[ … \], on one line or several
        const close = opened === "$$" ? "$$" : "\\]";
        let body = line.trim().slice(2);
        i += 1;
        while (!body.trimEnd().endsWith(close) && i < lines.length) body += "\n" + lines[i++];
        const source = body.trimEnd().endsWith(close) ? body.trimEnd().slice(0, -2) : body;
        root.append(el("div", {class: "math-block"}, mathView(source.trim(), true)));
        continue;
      }
      const heading = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
      if (heading) {
        root.append(el("h" + Math.min(6, heading[1].length + 2), {}, ...inline(heading[2])));
        i += 1;
        continue;
      }
      if (/^ {0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
        root.append(el("hr"));
        i += 1;
        continue;
      }
      if (/^\s{0,3}>/.test(line)) {
        const quoted = [];
        while (i < lines.length && /^\s{0,3}>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s{0,3}>\s?/, ""));
        root.append(el("blockquote", {}, depth < MAX_QUOTE_DEPTH ? renderMarkdown(quoted.join("\n"), depth + 1)
          : el("p", {}, ...withBreaks(quoted))));
        continue;
      }
      if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
        const table = el("table", {}, el("thead", {}, tableRow(line, "th")));
        const body = el("tbody");
        i += 2;
        while (i < lines.length && lines[i].includes("|") && lines[i].trim()) body.append(tableRow(lines[i++], "td"));
        table.append(body);
        root.append(table);
        continue;
      }
      const item = LIST_ITEM.exec(line);
      if (item) {
        const ordered = /\d/.test(item[1]);
        const list = el(ordered ? "ol" : "ul");
        if (ordered && parseInt(item[1], 10) !== 1) list.setAttribute("start", String(parseInt(item[1], 10)));
        while (i < lines.length) {
          const m = LIST_ITEM.exec(lines[i]);
          if (!m || /\d/.test(m[1]) !== ordered) break;
          const body = [m[2]];
          i += 1;
          while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !LIST_ITEM.exec(lines[i])) body.push(lines[i++].trim());
          list.append(el("li", {}, ...withBreaks(body)));
        }
        root.append(list);
        continue;
      }
      const paragraph = [];
      while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !LIST_ITEM.test(lines[i])
             && !/^ {0,3}(#{1,6}\s|>)/.test(lines[i]) && !displayMath(lines[i])) paragraph.push(lines[i++]);
      if (!paragraph.length) paragraph.push(lines[i++]);
      root.append(el("p", {}, ...withBreaks(paragraph)));
    }
    return root;
  }

  // --- server ----------------------------------------------------------------

  function headers() {
    const out = {"Content-Type": "application/json"};
    if (state.settings.api_key) out.Authorization = "Bearer " + state.settings.api_key;
    return out;
  }

  async function failure(response) {
    let message = response.status + " " + response.statusText;
    try {
      const body = await response.json();
      message = body?.error?.message || body?.message || message;
    } catch { /* not JSON */ }
    if (response.status === 401) {
      message += ". Enter the server's API key in Settings.";
      openSettings();
    }
    return new Error(message);
  }

  async function getJson(path) {
    const response = await fetch(PREFIX + path, {headers: headers()});
    if (!response.ok) throw await failure(response);
    return response.json();
  }

  // Server-sent events of a fetch response: each `data:` payload, parsed, until [DONE].
  // However the reading ends (a payload that is not JSON, the caller leaving the loop),
  // the response is cancelled, so the server stops generating for a reader that is gone.
  async function* events(response) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) return;
        buffer = (buffer + value).replace(/\r\n?/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""))
            .join("\n");
          if (!data) continue;
          if (data === "[DONE]") return;
          yield JSON.parse(data);
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  async function loadModels() {
    try {
      const listing = await getJson("/v1/models");
      state.models = (listing.data || []).map((m) => m.id);
      const select = $("model");
      select.replaceChildren(...state.models.map((id) => el("option", {value: id}, id)));
      const wanted = conversation()?.model || state.settings.model;
      if (wanted && state.models.includes(wanted)) select.value = wanted;
      $("server-state").textContent = state.models.length ? "" : "no model is served";
      await loadProps();
      hideNotice();
      await loadTools();
    } catch (error) {
      $("server-state").textContent = "server unreachable";
      notice(error.message);
    }
  }

  // a message sent while the server's props are on their way waits for them: its request
  // then carries the server's defaults (a system prompt, a token limit) as later ones do
  function loadProps() {
    state.propsLoaded = readProps();
    return state.propsLoaded;
  }

  async function readProps() {
    const model = $("model").value;
    try {
      const props = await getJson("/props" + (model && state.models.length > 1 ? "?model=" + encodeURIComponent(model) : ""));
      state.vision = Boolean(props?.modalities?.vision);
      state.corsProxy = props?.cors_proxy_enabled === true;
      state.serverSettings = serverSettings(props?.ui_settings ?? props?.webui_settings);
    } catch {
      state.vision = false;
      state.corsProxy = false;
      state.serverSettings = {};
    }
    $("attach").accept = state.vision ? "" : "text/*,.md,.py,.js,.ts,.json,.csv,.tsv,.yaml,.yml,.toml,.xml,.html,"
      + ".css,.c,.h,.cpp,.rs,.go,.java,.rb,.sh,.sql,.log,.ini,.cfg";
    if (!state.vision) state.attachments = state.attachments.filter((a) => a.text !== undefined);
  }

  // --- conversations -----------------------------------------------------------

  function startConversation() {
    const c = {id: newId(), title: "New chat", messages: [], updated: Date.now(), model: $("model").value};
    state.conversations.unshift(c);
    state.current = c.id;
    saveConversations();
    return c;
  }

  function wireMessages(messages) {
    const out = [];
    const system = setting("system");
    if (system) out.push({role: "system", content: system});
    const answered = new Set(messages.filter((m) => m.role === "tool").map((m) => m.tool_call_id));
    for (const m of messages) {
      if (m.role === "tool") {
        out.push({role: "tool", tool_call_id: m.tool_call_id, content: m.content});
        continue;
      }
      const calls = m.role === "assistant" ? (m.tool_calls || []).filter((call) => answered.has(call.id)) : [];
      if (calls.length) {  // calls never run (stopped, or out of turns) are left out
        out.push({role: "assistant", content: m.content || null, tool_calls: calls.map((call) => (
          {id: call.id, type: "function", function: {name: call.name, arguments: call.arguments}}))});
        continue;
      }
      if (m.role === "assistant" && (m.error || !m.content)) continue;  // failed or stopped before any text
      const text = m.role === "user" ? withFiles(m) : m.content;
      if (m.role === "user" && m.images?.length) {
        out.push({role: "user", content: [
          {type: "text", text},
          ...m.images.map((url) => ({type: "image_url", image_url: {url}})),
        ]});
      } else {
        out.push({role: m.role, content: text});
      }
    }
    return out;
  }

  function sampling() {
    const out = {};
    for (const key of SAMPLING) {
      const value = setting(key);
      if (value !== "" && Number.isFinite(Number(value))) out[key] = Number(value);
    }
    return out;
  }

  // a new reply to the conversation, or (`cut`: its last reply) that reply continued:
  // the server continues a final assistant message and streams the whole of it again.
  // With the server's tools on, a reply that calls tools has them run (write tools only
  // after the user allows it), their answers go back, and the model goes on.
  async function generate(c, cut = null) {
    const controller = new AbortController();
    state.controller = controller;
    setBusy(true);
    await state.propsLoaded;
    const turns = Math.max(1, parseInt(setting("max_tool_turns"), 10) || MAX_TOOL_TURNS);
    try {
      for (let turn = 1; ; turn += 1) {
        const reply = await streamTurn(c, cut, controller);
        cut = null;
        if (!reply.tool_calls?.length || reply.error || reply.stopped) break;
        if (turn >= turns) {
          reply.halted = "its tool calls were not run: " + turns + " model turns reached (Settings: Tool turns)";
          break;
        }
        if (!await runTools(c, reply, controller)) break;
      }
    } finally {
      if (state.controller === controller) state.controller = null;
      c.updated = Date.now();
      saveConversations();
      setBusy(false);
      renderAll();
    }
  }

  // what fetch and a stream's reader throw when the network fails ("Failed to fetch", "network error")
  const connectionLost = (error) => error instanceof TypeError && /fetch|network/i.test(error.message);

  async function streamTurn(c, cut, controller) {
    const history = wireMessages(c.messages);
    const before = cut ? cut.content : "";
    const reply = cut || {role: "assistant", content: "", reasoning: ""};
    if (cut) {
      for (const key of ["finish", "stopped", "error", "stats", "halted"]) delete reply[key];
      reply.content = "";
    } else {
      c.messages.push(reply);
    }
    c.model = $("model").value;
    c.updated = Date.now();
    saveConversations();
    renderAll();
    const started = performance.now();
    let firstAt = 0;
    let usage = null;
    let timings = null;
    const calls = [];  // by the stream's tool-call index
    const tools = toolsOn() ? {tools: state.tools.map((t) => t.definition)} : {};
    try {
      const response = await fetch(PREFIX + "/v1/chat/completions", {
        method: "POST", headers: headers(), signal: controller.signal,
        body: JSON.stringify({model: c.model || undefined, messages: history, stream: true,
                              stream_options: {include_usage: true}, ...tools, ...sampling()}),
      });
      if (!response.ok) throw await failure(response);
      for await (const event of events(response)) {
        if (event.error) throw new Error(event.error.message || "the generation failed");
        const choice = event.choices?.[0];
        if (choice?.delta) {
          const {content, reasoning_content: reasoning, tool_calls: deltas} = choice.delta;
          if (content || reasoning || deltas?.length) {
            firstAt ||= performance.now();
            if (content) reply.content += content;
            if (reasoning) reply.reasoning += reasoning;
            for (const delta of deltas || []) {
              const call = calls[delta.index ?? 0] ||= {id: "", name: "", arguments: ""};
              if (delta.id) call.id = delta.id;
              if (delta.function?.name) call.name += delta.function.name;
              if (delta.function?.arguments) call.arguments += delta.function.arguments;
              reply.tool_calls = calls.filter(Boolean);
            }
            scheduleRender();
          }
        }
        if (choice?.finish_reason) reply.finish = choice.finish_reason;
        if (event.usage) usage = event.usage;
        if (event.timings) timings = event.timings;
      }
    } catch (error) {
      if (error.name === "AbortError") reply.stopped = true;
      else reply.error = connectionLost(error) ? "the connection to the server was lost (" + error.message + ")"
        : error.message;
    } finally {
      if (cut && !reply.content.startsWith(before)) reply.content = before + reply.content;
      const ended = performance.now();
      if (usage) {
        const seconds = timings?.predicted_ms ? timings.predicted_ms / 1000 : (ended - (firstAt || started)) / 1000;
        reply.stats = {tokens: usage.completion_tokens, prompt: usage.prompt_tokens,
                       perSecond: seconds > 0 ? usage.completion_tokens / seconds : 0,
                       firstMs: firstAt ? firstAt - started : null};
      }
      c.updated = Date.now();
      saveConversations();
      renderAll();
    }
    return reply;
  }

  // --- server tools --------------------------------------------------------------

  const toolsOn = () => state.tools.length > 0 && $("use-tools").checked;

  async function loadTools() {
    let tools = [];
    try {
      const response = await fetch(PREFIX + "/tools", {headers: headers()});
      if (response.ok) tools = (await response.json()).filter((t) => t?.definition?.function?.name);
    } catch { /* no server tools */ }
    const problems = [];
    try {
      const servers = window.mlxcelMcp.parseServers(state.settings.mcp_servers);
      if (servers.length && !state.corsProxy) {
        problems.push("MCP servers are reached through the server's MCP proxy, which it does not serve "
                      + "(--ui-mcp-proxy or --agent).");
      } else if (servers.length) {
        const taken = new Set(tools.map((t) => t.definition.function.name));
        tools = tools.concat(await window.mlxcelMcp.remoteTools(servers, headers, taken,
          (url, message) => problems.push("MCP server " + url + ": " + message)));
      }
    } catch (error) {
      problems.push(error.message);
    }
    if (problems.length) notice(problems.join("\n"));
    state.tools = tools;
    $("tools-toggle").hidden = state.tools.length === 0;
    $("tools-count").textContent = "(" + state.tools.length + ")";
    $("use-tools").checked = state.settings.use_tools !== false;
  }

  // each call of `reply` run in turn, its answer added as a tool message; false when
  // the user stopped
  async function runTools(c, reply, controller) {
    for (const call of reply.tool_calls) {
      call.id ||= "call_" + newId();
      const result = {role: "tool", tool_call_id: call.id, name: call.name, content: ""};
      c.messages.push(result);
      renderAll();
      result.content = await callTool(call, controller);
      if (controller.signal.aborted) {
        result.content ||= JSON.stringify({error: "stopped by the user"});
        return false;
      }
      saveConversations();
      renderAll();
    }
    return true;
  }

  async function callTool(call, controller) {
    const tool = state.tools.find((t) => t.definition.function.name === call.name);
    if (!tool) return JSON.stringify({error: "unknown tool " + JSON.stringify(call.name)});
    let params;
    try {
      params = call.arguments.trim() ? JSON.parse(call.arguments) : {};
    } catch {
      return JSON.stringify({error: "the arguments are not valid JSON"});
    }
    if (tool.permissions?.write
        && !window.confirm("Allow " + (tool.display_name || call.name) + "?\n\n" + JSON.stringify(params, null, 2))) {
      return JSON.stringify({error: "the user did not allow this call"});
    }
    try {
      if (tool.run) return clip(await tool.run(params, controller.signal));
      const response = await fetch(PREFIX + "/tools", {
        method: "POST", headers: headers(), signal: controller.signal,
        body: JSON.stringify({tool: tool.tool, params}),
      });
      const body = await response.json().catch(() => ({}));
      return clip(!response.ok ? JSON.stringify({error: body?.error?.message || response.statusText})
        : typeof body.plain_text_response === "string" ? body.plain_text_response : JSON.stringify(body));
    } catch (error) {
      return error.name === "AbortError" ? "" : JSON.stringify({error: error.message});
    }
  }

  const clip = (text) => text.length > TOOL_RESULT_CHARS ? text.slice(0, TOOL_RESULT_CHARS) + "\n[cut]" : text;

  async function send(text) {
    if (state.controller) return;
    const c = conversation() || startConversation();
    const message = {role: "user", content: text};
    const images = state.attachments.filter((a) => a.url).map((a) => a.url);
    const files = state.attachments.filter((a) => a.text !== undefined).map(({name, text}) => ({name, text}));
    if (images.length) message.images = images;
    if (files.length) message.files = files;
    c.messages.push(message);
    if (c.title === "New chat") c.title = text.replace(/\s+/g, " ").trim().slice(0, 60) || "New chat";
    clearAttachments();
    await generate(c);
  }

  function regenerate(c) {
    if (state.controller) return;
    while (c.messages.length && c.messages[c.messages.length - 1].role !== "user") c.messages.pop();
    if (c.messages.length) generate(c);
  }

  // --- rendering -----------------------------------------------------------------

  let renderQueued = false;
  function scheduleRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      renderConversation();
    });
  }

  function copyText(text, button) {
    navigator.clipboard?.writeText(text).then(() => {
      const label = button.textContent;
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = label; }, 1200);
    }, () => notice("The clipboard is not available here."));
  }

  function toolButton(label, onClick) {
    const button = el("button", {type: "button"}, label);
    button.addEventListener("click", onClick);
    return button;
  }

  function statsText(stats) {
    const parts = [stats.tokens + " tokens"];
    if (stats.perSecond) parts.push(stats.perSecond.toFixed(1) + " tokens/s");
    if (stats.firstMs !== null && stats.firstMs !== undefined) parts.push("first after " + Math.round(stats.firstMs) + " ms");
    return parts.join(" · ");
  }

  function messageView(c, m, index) {
    const last = index === c.messages.length - 1;
    const running = last && state.controller !== null && m.role === "assistant";
    const view = el("article", {class: "message " + m.role + (running ? " pending" : "")});
    const bubble = el("div", {class: "bubble"});
    if (m.role === "user") {
      bubble.append(m.content);
      if (m.images?.length) {
        bubble.append(el("div", {class: "images"}, ...m.images.map((src) => el("img", {src, alt: "attached image"}))));
      }
      if (m.files?.length) {
        bubble.append(el("div", {class: "files"}, ...m.files.map((f) => el("span", {class: "file"}, f.name))));
      }
    } else if (m.role === "tool") {
      const details = el("details", {class: "tool-result"},
                         el("summary", {}, (m.content ? "Result of " : "Running ") + m.name + (m.content ? "" : "…")),
                         el("pre", {}, m.content));
      bubble.append(details);
    } else {
      if (m.reasoning) {
        const summary = el("summary", {}, running && !m.content ? "Thinking…" : "Thoughts");
        const details = el("details", {class: "reasoning"}, summary, m.reasoning);
        details.open = m.showReasoning ?? (running && !m.content);  // open while only thoughts come
        summary.addEventListener("click", () => { m.showReasoning = !details.open; });
        bubble.append(details);
      }
      bubble.append(renderMarkdown(m.content));
      for (const call of m.tool_calls || []) {
        bubble.append(el("details", {class: "tool-call"}, el("summary", {}, "Calls " + call.name),
                         el("pre", {}, call.arguments)));
      }
    }
    view.append(bubble);
    const tools = el("div", {class: "tools"});
    if (m.error) tools.append(el("span", {class: "error"}, "Error: " + m.error));
    if (m.stopped) tools.append(el("span", {}, "stopped"));
    if (m.finish === "length") tools.append(el("span", {}, "cut at the token limit"));
    if (m.halted) tools.append(el("span", {class: "halted"}, m.halted));
    if (m.stats) tools.append(el("span", {class: "stats"}, statsText(m.stats)));
    if (!running && m.role !== "tool") {
      tools.append(toolButton("Copy", (e) => copyText(m.content, e.currentTarget)));
      if (m.role === "user") tools.append(toolButton("Edit", () => editMessage(c, index, view)));
      if (m.role === "assistant" && last) tools.append(toolButton("Regenerate", () => regenerate(c)));
      if (m.role === "assistant" && last && m.content && !m.tool_calls?.length && (m.finish === "length" || m.stopped || m.error)) {
        tools.append(toolButton("Continue", () => { if (!state.controller) generate(c, m); }));
      }
    }
    view.append(tools);
    return view;
  }

  function editMessage(c, index, view) {
    if (state.controller) return;
    const {images, files} = c.messages[index];
    const area = el("textarea");
    area.value = c.messages[index].content;
    const save = toolButton("Send", () => {
      const text = area.value.trim();
      if (!text || state.controller) return;
      c.messages.splice(index);  // this message and everything after it
      c.messages.push({role: "user", content: text, ...(images && {images}), ...(files && {files})});
      generate(c);
    });
    view.replaceChildren(el("div", {class: "edit"}, area,
                            el("div", {class: "tools"}, save, toolButton("Cancel", () => {
                              views.delete(c.messages[index]);
                              renderConversation();
                            }))));
    area.focus();
  }

  // a message's view is rebuilt only when what it shows changed (a stream re-renders
  // every frame; finished messages keep their elements)
  const views = new WeakMap();
  function cachedView(c, m, index) {
    const last = index === c.messages.length - 1;  // only the last has Regenerate: a message added below
    const running = last && state.controller !== null;  // rebuilds the one before it, not all of them
    const key = [c.id, index, last, running, m.content.length, m.reasoning?.length, m.error, m.stopped,
                 m.finish, Boolean(m.stats), m.halted, (m.tool_calls || []).map((t) => t.name + t.arguments.length)].join("|");
    const cached = views.get(m);
    if (cached && cached.key === key) return cached.view;
    const view = messageView(c, m, index);
    views.set(m, {key, view});
    return view;
  }

  // only the views that changed are put in: the others stay where they are, so a text
  // selected in an earlier message survives a reply streaming below it
  function renderConversation() {
    const box = $("messages");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    const c = conversation();
    const wanted = c ? c.messages.map((m, i) => cachedView(c, m, i)) : [];
    if (!wanted.length) wanted.push(el("p", {class: "hint"}, "Send a message to start."));
    wanted.forEach((view, i) => {
      if (box.children[i] !== view) box.insertBefore(view, box.children[i] ?? null);
    });
    while (box.children.length > wanted.length) box.lastElementChild.remove();
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  function renderSidebar() {
    const nav = $("conversations");
    nav.replaceChildren(...state.conversations.map((c) => {
      const open = el("button", {type: "button", class: "open", title: c.title}, c.title);
      open.addEventListener("click", () => {
        if (state.controller) return;
        state.current = c.id;
        if (c.model && state.models.includes(c.model)) $("model").value = c.model;
        saveConversations();
        renderAll();
      });
      const remove = el("button", {type: "button", class: "delete", "aria-label": "Delete " + c.title}, "×");
      remove.addEventListener("click", () => {
        if (state.controller && c.id === state.current) return;
        state.conversations = state.conversations.filter((other) => other !== c);
        if (state.current === c.id) state.current = state.conversations[0]?.id ?? null;
        saveConversations();
        renderAll();
      });
      return el("div", {class: "conversation" + (c.id === state.current ? " current" : "")}, open, remove);
    }));
  }

  function renderAll() {
    renderSidebar();
    renderConversation();
  }

  function setBusy(busy) {
    // a live region marked busy is announced once it settles, not again at every frame of a reply
    $("messages").setAttribute("aria-busy", String(busy));
    $("send").hidden = busy;
    $("stop").hidden = !busy;
    $("new-chat").disabled = busy;
  }

  function notice(text) {
    const box = $("notice");
    box.textContent = text;
    box.hidden = false;
  }

  function hideNotice() {
    $("notice").hidden = true;
  }

  // --- attachments ---------------------------------------------------------------

  function clearAttachments() {
    state.attachments = [];
    $("attachments").replaceChildren();
  }

  function showAttachment(attachment, preview) {
    const remove = toolButton("×", () => {
      state.attachments = state.attachments.filter((a) => a !== attachment);
      item.remove();
    });
    remove.setAttribute("aria-label", "Remove " + attachment.name);  // read aloud as its name, not "times"
    const item = el("div", {class: "attachment", title: attachment.name}, preview, remove);
    $("attachments").append(item);
  }

  // an image (for a model with vision) goes with the message as an image part; any
  // other file is read as text and sent inside the message
  function addAttachment(file) {
    const reader = new FileReader();
    if (file.type.startsWith("image/")) {
      if (!state.vision) return notice("This model takes no images.");
      if (file.size > MAX_IMAGE_BYTES) return notice(file.name + " is larger than 8 MB.");
      reader.onload = () => {
        const attachment = {name: file.name, url: reader.result};
        state.attachments.push(attachment);
        showAttachment(attachment, el("img", {src: attachment.url, alt: file.name}));
      };
      reader.readAsDataURL(file);
      return;
    }
    if (file.size > MAX_TEXT_BYTES) return notice(file.name + " is larger than 1 MB.");
    reader.onload = () => {
      const text = reader.result;
      if (text.includes("\u0000")) return notice(file.name + " is not a text file.");
      const attachment = {name: file.name, text};
      state.attachments.push(attachment);
      showAttachment(attachment, el("span", {class: "file"}, file.name));
    };
    reader.readAsText(file);
  }

  // a user message's text with its text files after it, as the model reads them
  function withFiles(m) {
    if (!m.files?.length) return m.content;
    return [m.content, ...m.files.map((f) => "File " + f.name + ":\n" + f.text)].join("\n\n");
  }

  // --- export and import ----------------------------------------------------------

  function exportConversations() {
    const blob = new Blob([JSON.stringify({mlxcel_conversations: 1, conversations: state.conversations}, null, 1)],
                          {type: "application/json"});
    const a = el("a", {href: URL.createObjectURL(blob), download: "mlxcel-conversations.json"});
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  }

  async function importConversations(file) {
    let data;
    try {
      data = JSON.parse(await file.text());
    } catch {
      return notice(file.name + " is not a JSON file.");
    }
    const given = Array.isArray(data) ? data : data?.conversations;
    if (!Array.isArray(given)) return notice(file.name + " holds no conversations.");
    const added = keptConversations(given, new Set(state.conversations.map((c) => c.id)), "Imported chat");
    state.conversations.push(...added);
    state.conversations.sort((a, b) => b.updated - a.updated);
    saveConversations();
    renderAll();
    notice(added.length + " conversation" + (added.length === 1 ? "" : "s") + " imported.");
  }

  // --- settings --------------------------------------------------------------------

  function serverSettings(given) {
    const out = {};
    if (!given || typeof given !== "object" || Array.isArray(given)) return out;
    for (const [name, key] of Object.entries(SERVER_SETTINGS)) {
      const value = given[name];
      if ((typeof value === "string" || typeof value === "number") && !(key in out)) out[key] = String(value);
    }
    return out;
  }

  // the user's own value, else the server's default for the UI, else "" (the API's default)
  function setting(key) {
    const own = state.settings[key];
    if (own !== undefined && own !== null && own !== "") return String(own);
    return state.serverSettings[key] ?? "";
  }

  function openSettings() {
    const form = $("settings-form");
    for (const field of form.elements) {
      if (!field.name) continue;
      field.value = state.settings[field.name] ?? "";
      const fallback = state.serverSettings[field.name];
      field.placeholder = fallback === undefined || field.name === "api_key" ? "" : "server: " + fallback;
    }
    if (!$("settings").open) $("settings").showModal();
  }

  function saveSettings() {
    const settings = {model: state.settings.model, use_tools: state.settings.use_tools};
    for (const field of $("settings-form").elements) {
      if (field.name && field.value !== "") settings[field.name] = field.value;
    }
    state.settings = settings;
    store.save("settings", settings);
    loadModels();
  }

  // --- wiring ------------------------------------------------------------------------

  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("prompt").value.trim();
    if (!text || state.controller) return;
    $("prompt").value = "";
    send(text);
  });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => state.controller?.abort());
  $("new-chat").addEventListener("click", () => {
    if (state.controller) return;
    const c = conversation();
    if (!c || c.messages.length) startConversation();
    renderAll();
    $("prompt").focus();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.controller && !$("settings").open) state.controller.abort();
  });
  $("toggle-sidebar").addEventListener("click", () => $("sidebar").classList.toggle("hidden"));
  $("model").addEventListener("change", () => {
    state.settings.model = $("model").value;
    store.save("settings", state.settings);
    loadProps();
  });
  $("open-settings").addEventListener("click", openSettings);
  $("use-tools").addEventListener("change", () => {
    state.settings.use_tools = $("use-tools").checked;
    store.save("settings", state.settings);
  });
  // saved as the Save button submits, before the dialog closes: its "close" event comes in a
  // task of its own, and a message sent before that task ran went with the old settings
  $("settings-form").addEventListener("submit", (event) => {
    if (event.submitter?.value === "save") saveSettings();
  });
  $("export").addEventListener("click", exportConversations);
  $("import").addEventListener("change", (event) => {
    const [file] = event.target.files;
    event.target.value = "";
    if (file && !state.controller) importConversations(file);
  });
  $("attach").addEventListener("change", (event) => {
    for (const file of event.target.files) addAttachment(file);
    event.target.value = "";
  });
  // Another tab changed the conversations: its list is taken, even while this tab generates
  // (it saves its whole list when the reply ends, and a list not taken would then undo the
  // other tab's changes); the conversation generating here stays this tab's own object.
  window.addEventListener("storage", (event) => {
    if (event.key !== "mlxcel.conversations") return;
    const mine = state.controller ? conversation() : null;
    const stored = keptConversations(store.load("conversations", []));
    state.conversations = stored.map((c) => (mine && c.id === mine.id ? mine : c));
    if (mine && !stored.some((c) => c.id === mine.id)) state.conversations.unshift(mine);
    renderAll();
  });

  window.mlxcel = {renderMarkdown, events};  // for tests and the console
  renderAll();
  loadModels();
})();
