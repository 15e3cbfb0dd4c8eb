// TeX math (the subset chat models write) as MathML elements, which the browser lays
// out itself. Elements are built one by one (createElementNS), never from HTML text, and
// a formula that does not parse is shown as its source, as text.
(() => {
  "use strict";

  const NS = "http://www.w3.org/1998/Math/MathML";
  const MAX_SOURCE = 4000;  // characters of one formula
  const MAX_DEPTH = 40;  // nested groups

  const GREEK = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ϵ", varepsilon: "ε", zeta: "ζ", eta: "η",
    theta: "θ", vartheta: "ϑ", iota: "ι", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν", xi: "ξ", pi: "π",
    varpi: "ϖ", rho: "ρ", varrho: "ϱ", sigma: "σ", varsigma: "ς", tau: "τ", upsilon: "υ", phi: "ϕ",
    varphi: "φ", chi: "χ", psi: "ψ", omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Xi: "Ξ",
    Pi: "Π", Sigma: "Σ", Upsilon: "Υ", Phi: "Φ", Psi: "Ψ", Omega: "Ω", ell: "ℓ", hbar: "ℏ", infty: "∞",
    partial: "∂", nabla: "∇", emptyset: "∅", Re: "ℜ", Im: "ℑ", aleph: "ℵ",
  };
  const OPERATORS = {
    cdot: "⋅", times: "×", div: "÷", pm: "±", mp: "∓", ast: "∗", star: "⋆", circ: "∘", bullet: "∙",
    le: "≤", leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠", approx: "≈", sim: "∼", simeq: "≃", cong: "≅",
    equiv: "≡", propto: "∝", ll: "≪", gg: "≫", in: "∈", notin: "∉", ni: "∋", subset: "⊂", supset: "⊃",
    subseteq: "⊆", supseteq: "⊇", cup: "∪", cap: "∩", setminus: "∖", wedge: "∧", land: "∧", vee: "∨",
    lor: "∨", neg: "¬", lnot: "¬", forall: "∀", exists: "∃", to: "→", rightarrow: "→", leftarrow: "←",
    gets: "←", leftrightarrow: "↔", Rightarrow: "⇒", Leftarrow: "⇐", Leftrightarrow: "⇔", implies: "⟹",
    iff: "⟺", mapsto: "↦", uparrow: "↑", downarrow: "↓", mid: "∣", parallel: "∥", perp: "⊥", angle: "∠",
    ldots: "…", cdots: "⋯", vdots: "⋮", ddots: "⋱", dots: "…", prime: "′", oplus: "⊕", otimes: "⊗",
    langle: "⟨", rangle: "⟩", lfloor: "⌊", rfloor: "⌋", lceil: "⌈", rceil: "⌉", vert: "|", Vert: "‖",
    lbrace: "{", rbrace: "}", colon: ":", therefore: "∴", because: "∵",
  };
  const LARGE = {sum: "∑", prod: "∏", coprod: "∐", bigcup: "⋃", bigcap: "⋂", bigoplus: "⨁", bigotimes: "⨂"};
  const INTEGRALS = {int: "∫", iint: "∬", iiint: "∭", oint: "∮"};  // their limits go beside them
  const FUNCTIONS = new Set(["sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh",
                             "cosh", "tanh", "log", "ln", "lg", "exp", "min", "max", "sup", "inf", "lim",
                             "limsup", "liminf", "det", "gcd", "deg", "dim", "ker", "arg", "Pr", "mod"]);
  const SPACES = {",": "0.1667em", ":": "0.2222em", ";": "0.2778em", " ": "0.25em", quad: "1em",
                  qquad: "2em", "!": "-0.1667em"};
  const ACCENTS = {hat: "^", bar: "¯", overline: "¯", vec: "→", tilde: "~", dot: "˙", ddot: "¨",
                   widehat: "^", widetilde: "~"};
  const FONTS = {mathbb: {R: "ℝ", N: "ℕ", Z: "ℤ", Q: "ℚ", C: "ℂ", P: "ℙ", H: "ℍ"}};
  const ENVIRONMENTS = {matrix: ["", ""], pmatrix: ["(", ")"], bmatrix: ["[", "]"], Bmatrix: ["{", "}"],
                        vmatrix: ["|", "|"], Vmatrix: ["‖", "‖"], cases: ["{", ""], aligned: ["", ""],
                        align: ["", ""], "align*": ["", ""], array: ["", ""], gathered: ["", ""]};

  class ParseError extends Error {}

  function node(tag, attrs = {}, ...children) {
    const n = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    for (const c of children) n.append(typeof c === "string" ? document.createTextNode(c) : c);
    return n;
  }

  function tokenize(source) {
    const tokens = [];
    const re = /\\([A-Za-z]+\*?|.)|(\s+)|([0-9]+(?:\.[0-9]+)?)|([\s\S])/g;
    let m;
    while ((m = re.exec(source))) {
      if (m[1] !== undefined) tokens.push({command: m[1]});
      else if (m[2] !== undefined) tokens.push({space: m[2]});  // kept for \text; math skips it
      else if (m[3] !== undefined) tokens.push({number: m[3]});
      else if (m[4] !== undefined) tokens.push({char: m[4]});
    }
    return tokens;
  }

  class Parser {
    constructor(source) {
      this.tokens = tokenize(source);
      this.at = 0;
      this.depth = 0;
    }

    peek() {
      while (this.tokens[this.at]?.space !== undefined) this.at += 1;
      return this.tokens[this.at];
    }

    next() {
      this.peek();
      return this.tokens[this.at++];
    }

    // a row up to one of `stops` (chars or commands), not consuming it
    row(stops = []) {
      if (++this.depth > MAX_DEPTH) throw new ParseError("nested too deeply");
      const items = [];
      for (;;) {
        const t = this.peek();
        if (!t || (t.char && stops.includes(t.char)) || (t.command && stops.includes("\\" + t.command))) break;
        const item = this.atom();
        if (!item) continue;
        items.push(this.scripts(item));
        if (item.getAttribute?.("data-fn")) items.push(node("mspace", {width: "0.1667em"}));  // sin x
      }
      this.depth -= 1;
      return items;
    }

    group() {  // {…} or a single token
      const t = this.peek();
      if (!t) throw new ParseError("missing argument");
      if (t.char === "{") {
        this.next();
        const items = this.row(["}"]);
        if (!this.next()) throw new ParseError("missing }");
        return items.length === 1 ? items[0] : node("mrow", {}, ...items);
      }
      const item = this.atom();
      if (!item) throw new ParseError("missing argument");
      return item;
    }

    text() {  // {…} as plain text, its spaces kept
      if (this.next()?.char !== "{") throw new ParseError("missing {");
      let out = "";
      for (let t = this.tokens[this.at++]; t && t.char !== "}"; t = this.tokens[this.at++]) {
        out += t.space !== undefined ? " " : t.char ?? t.number ?? (t.command.length === 1 ? t.command : "\\" + t.command);
      }
      return out;
    }

    scripts(base) {
      let sub = null, sup = null;
      for (let t = this.peek(); t && (t.char === "_" || t.char === "^" || t.char === "'"); t = this.peek()) {
        this.next();
        if (t.char === "'") sup = node("mo", {}, "′");
        else if (t.char === "_") sub = this.group();
        else sup = this.group();
      }
      const large = base.getAttribute?.("data-large");
      if (sub && sup) return node(large ? "munderover" : "msubsup", {}, base, sub, sup);
      if (sub) return node(large ? "munder" : "msub", {}, base, sub);
      if (sup) return node(large ? "mover" : "msup", {}, base, sup);
      return base;
    }

    atom() {
      const t = this.next();
      if (t.number !== undefined) return node("mn", {}, t.number);
      if (t.char !== undefined) {
        const c = t.char;
        if (c === "{") {
          this.at -= 1;
          return this.group();
        }
        if (c === "}") throw new ParseError("unbalanced }");
        if (c === "&") return node("mo", {}, "&");
        if (c === "~") return node("mspace", {width: "0.25em"});
        if (/[A-Za-z\u0370-\u03ff]/.test(c)) return node("mi", {}, c);
        return node("mo", {}, c === "-" ? "−" : c === "*" ? "∗" : c);
      }
      return this.command(t.command);
    }

    command(name) {
      if (name in GREEK) return node("mi", /[A-Z]/.test(name[0]) ? {mathvariant: "normal"} : {}, GREEK[name]);
      if (name in OPERATORS) return node("mo", {}, OPERATORS[name]);
      if (name in LARGE) return node("mo", {largeop: "true", "data-large": "1"}, LARGE[name]);
      if (name in INTEGRALS) return node("mo", {largeop: "true"}, INTEGRALS[name]);
      if (FUNCTIONS.has(name)) {
        const limits = ["lim", "max", "min", "sup", "inf", "limsup", "liminf", "det", "gcd", "Pr"].includes(name);
        return node("mi", {mathvariant: "normal", "data-fn": "1", ...(limits ? {"data-large": "1"} : {})}, name);
      }
      if (name in SPACES) return node("mspace", {width: SPACES[name]});
      if (name in ACCENTS) return node("mover", {accent: "true"}, this.group(), node("mo", {}, ACCENTS[name]));
      switch (name) {
        case "frac": case "dfrac": case "tfrac": case "cfrac": return node("mfrac", {}, this.group(), this.group());
        case "binom": return node("mrow", {}, node("mo", {}, "("),
                                  node("mfrac", {linethickness: "0"}, this.group(), this.group()), node("mo", {}, ")"));
        case "sqrt": {
          if (this.peek()?.char === "[") {
            this.next();
            const index = this.row(["]"]);
            this.next();
            return node("mroot", {}, this.group(), node("mrow", {}, ...index));
          }
          return node("msqrt", {}, this.group());
        }
        case "text": case "textrm": case "textit": case "textbf": case "mbox": case "operatorname":
          return node(name === "operatorname" ? "mi" : "mtext",
                      {mathvariant: "normal", ...(name === "textbf" ? {class: "bold"} : {})}, this.text());
        case "mathrm": case "mathit": case "mathbf": case "mathsf": case "mathtt": case "mathcal": case "boldsymbol": {
          const inner = this.group();
          if (name === "mathrm" || name === "mathbf") inner.setAttribute("mathvariant", "normal");  // upright
          // a class, not a style attribute: the page's Content-Security-Policy refuses inline styles
          if (name === "mathbf" || name === "boldsymbol") inner.classList.add("bold");
          return inner;
        }
        case "mathbb": {
          const letters = this.text();
          return node("mi", {mathvariant: "normal"}, [...letters].map((ch) => FONTS.mathbb[ch] ?? ch).join(""));
        }
        case "left": case "right": case "big": case "Big": case "bigg": case "Bigg": case "bigl": case "bigr":
        case "Bigl": case "Bigr": {
          const t = this.next();
          if (!t) throw new ParseError("missing delimiter");
          const symbol = t.char === "." ? "" : t.char ?? OPERATORS[t.command] ?? (t.command?.length === 1 ? t.command : "");
          return node("mo", {stretchy: "true"}, symbol);
        }
        case "begin": return this.environment(this.text());
        case "displaystyle": case "textstyle": case "limits": case "nolimits": case "nonumber": return null;
        case "{": case "}": case "_": case "%": case "$": case "#": case "&": return node("mo", {}, name);
        case "\\": return node("mspace", {linebreak: "newline"});
        default: return node("mtext", {class: "unknown"}, "\\" + name);
      }
    }

    environment(name) {
      if (!(name in ENVIRONMENTS)) throw new ParseError("unknown environment " + name);
      if (name === "array" && this.peek()?.char === "{") this.text();  // the column spec
      const rows = [[[]]];
      for (;;) {
        const t = this.peek();
        if (!t) throw new ParseError("missing \\end");
        if (t.command === "end") {
          this.next();
          this.text();
          break;
        }
        if (t.char === "&") {
          this.next();
          rows[rows.length - 1].push([]);
          continue;
        }
        if (t.command === "\\") {
          this.next();
          rows.push([[]]);
          continue;
        }
        const cells = rows[rows.length - 1];
        cells[cells.length - 1].push(...this.row(["&", "\\\\", "\\end"]));
      }
      if (rows.length > 1 && rows[rows.length - 1].every((cell) => !cell.length)) rows.pop();
      const table = node("mtable", {}, ...rows.map((cells) => node("mtr", {},
        ...cells.map((items) => node("mtd", {}, ...items)))));
      const [open, close] = ENVIRONMENTS[name];
      return node("mrow", {}, ...(open ? [node("mo", {}, open)] : []), table, ...(close ? [node("mo", {}, close)] : []));
    }
  }

  // the formula as a <math> element; its source as text when it does not parse
  function render(source, display) {
    const fallback = () => {
      const code = document.createElement("code");
      code.className = "math-source";
      code.textContent = display ? "$$" + source + "$$" : "$" + source + "$";
      return code;
    };
    if (source.length > MAX_SOURCE) return fallback();
    try {
      const parser = new Parser(source);
      const items = parser.row();
      if (parser.peek()) return fallback();
      const math = node("math", display ? {display: "block"} : {}, node("mrow", {}, ...items));
      math.querySelectorAll("[data-large], [data-fn]").forEach((n) => {
        n.removeAttribute("data-large");
        n.removeAttribute("data-fn");
      });
      return math;
    } catch (error) {
      if (error instanceof ParseError || error instanceof RangeError) return fallback();
      throw error;
    }
  }

  window.mlxcelMath = {render};
})();
