// Remote MCP servers for the chat page's agent: MCP's Streamable HTTP transport (JSON-RPC
// POSTs answered with JSON or with an event stream), reached through this server's
// /cors-proxy (--ui-mcp-proxy or --agent). The page's Content-Security-Policy lets it talk
// to its own server only, and the proxy sends on just the headers named
// x-llama-server-proxy-header-NAME, so the user's headers for a server go that way.
"use strict";

(() => {
  const PREFIX = document.querySelector('meta[name="mlxcel-prefix"]').content;
  const FORWARD = "x-llama-server-proxy-header-";
  const PROTOCOL = "2025-06-18";
  const MAX_PAGES = 20;  // of tools/list
  const MAX_TOOLS = 256;
  const MAX_EVENT_BYTES = 16 * 1024 * 1024;  // read of one answer's event stream
  const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;

  // "URL" lines, each followed by its own "Name: value" header lines
  function parseServers(text) {
    const servers = [];
    for (const [index, raw] of String(text || "").split("\n").entries()) {
      const line = raw.trim();
      if (!line) continue;
      if (/^https?:\/\/\S+$/i.test(line)) {
        servers.push({url: line, headers: {}});
        continue;
      }
      const header = /^([^:\s]+):\s*(.*)$/.exec(line);
      if (!header || !HEADER_NAME.test(header[1]) || !servers.length) {
        throw new Error("MCP servers, line " + (index + 1) + ": not a URL (http or https) nor a 'Name: value' header "
                        + "under one");
      }
      servers[servers.length - 1].headers[header[1].toLowerCase()] = header[2];
    }
    return servers;
  }

  async function reason(response) {
    const text = await response.text().catch(() => "");
    try {
      const body = JSON.parse(text);
      if (body?.error?.message) return body.error.message;
    } catch { /* not JSON: the text itself */ }
    return response.status + " " + (text.trim().slice(0, 200) || response.statusText);
  }

  // the JSON-RPC answer to request `id` in an event stream (notifications before it are skipped)
  async function answerIn(response, id) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let read = 0;
    let data = [];
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        read += value.length;
        if (read > MAX_EVENT_BYTES) throw new Error("the server's answer is too long");
        buffer += decoder.decode(value, {stream: true});
        let end;
        while ((end = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, end).replace(/\r$/, "");
          buffer = buffer.slice(end + 1);
          if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
          else if (line === "" && data.length) {
            let message = null;
            try { message = JSON.parse(data.join("\n")); } catch { /* not JSON-RPC: skipped */ }
            data = [];
            if (message && message.id === id && ("result" in message || "error" in message)) return message;
          }
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
    throw new Error("the server's event stream ended without an answer");
  }

  class Remote {
    constructor(url, headers, ownHeaders) {
      this.url = url;
      this.headers = headers;
      this.ownHeaders = ownHeaders;  // this server's own (its API key)
      this.session = null;
      this.nextId = 1;
    }

    post(message, signal) {
      const forwarded = {...this.headers, "accept": "application/json, text/event-stream",
                         "content-type": "application/json", "mcp-protocol-version": PROTOCOL};
      if (this.session) forwarded["mcp-session-id"] = this.session;
      const headers = {...this.ownHeaders(), "Content-Type": "application/json"};
      for (const [name, value] of Object.entries(forwarded)) headers[FORWARD + name] = value;
      return fetch(PREFIX + "/cors-proxy?url=" + encodeURIComponent(this.url),
                   {method: "POST", headers, body: JSON.stringify(message), signal});
    }

    async request(method, params, signal, again = true) {
      const id = this.nextId++;
      const response = await this.post({jsonrpc: "2.0", id, method, params}, signal);
      if (response.status === 404 && this.session && again) {  // the session expired: a new one, once
        this.session = null;
        await this.initialize(signal);
        return this.request(method, params, signal, false);
      }
      if (!response.ok) throw new Error(await reason(response));
      this.session = response.headers.get("mcp-session-id") || this.session;
      const type = response.headers.get("content-type") || "";
      const answer = type.includes("text/event-stream") ? await answerIn(response, id) : await response.json();
      if (answer?.error) throw new Error(answer.error.message || "error " + answer.error.code);
      return answer?.result ?? {};
    }

    async initialize(signal) {
      const info = await this.request("initialize", {protocolVersion: PROTOCOL, capabilities: {},
                                                     clientInfo: {name: "mlxcel web UI", version: "1"}}, signal);
      const response = await this.post({jsonrpc: "2.0", method: "notifications/initialized"}, signal);
      await response.body?.cancel();
      return info;
    }

    async tools(signal) {
      const found = [];
      let cursor;
      for (let page = 0; page < MAX_PAGES && found.length < MAX_TOOLS; page += 1) {
        const result = await this.request("tools/list", cursor ? {cursor} : {}, signal);
        found.push(...(Array.isArray(result.tools) ? result.tools : []).filter((t) => typeof t?.name === "string"));
        cursor = result.nextCursor;
        if (!cursor) break;
      }
      return found.slice(0, MAX_TOOLS);
    }

    // the text the model reads: the result's text parts, or {"error"} when the tool failed
    async call(name, args, signal) {
      const result = await this.request("tools/call", {name, arguments: args}, signal);
      const parts = (Array.isArray(result.content) ? result.content : []).map((part) =>
        part?.type === "text" ? String(part.text ?? "") : "[" + (part?.type || "part") + "]");
      let text = parts.join("\n");
      if (!text && result.structuredContent !== undefined) text = JSON.stringify(result.structuredContent);
      return result.isError ? JSON.stringify({error: text || "the tool failed"}) : text;
    }
  }

  // a function name the chat API takes ([A-Za-z0-9_-], at most 64), unique among `taken`
  function toolName(prefix, name, taken) {
    const clean = (prefix + "_" + name).replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64);
    let out = clean;
    for (let n = 2; taken.has(out); n += 1) out = clean.slice(0, 60) + "_" + n;
    taken.add(out);
    return out;
  }

  // every configured server's tools, as the page's tool entries; a server that cannot be
  // reached is reported through `failed(url, message)` and left out
  async function remoteTools(servers, ownHeaders, taken, failed) {
    const out = [];
    for (const server of servers) {
      const remote = new Remote(server.url, server.headers, ownHeaders);
      try {
        const signal = AbortSignal.timeout(15000);
        const info = await remote.initialize(signal);
        const label = String(info?.serverInfo?.name || new URL(server.url).hostname).slice(0, 24);
        for (const tool of await remote.tools(signal)) {
          const name = toolName(label, tool.name, taken);
          const schema = tool.inputSchema && typeof tool.inputSchema === "object" ? tool.inputSchema
            : {type: "object", properties: {}};
          out.push({tool: name, display_name: String(tool.annotations?.title || tool.title || tool.name),
                    permissions: {write: tool.annotations?.readOnlyHint !== true},
                    definition: {type: "function", function: {name, description: String(tool.description || ""),
                                                               parameters: schema}},
                    run: (args, signal) => remote.call(tool.name, args, signal)});
        }
      } catch (error) {
        failed(server.url, error.name === "TimeoutError" ? "no answer in 15 s" : error.message);
      }
    }
    return out;
  }

  window.mlxcelMcp = {parseServers, remoteTools};
})();
