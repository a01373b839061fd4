// Markdown in a model's answer, drawn as DOM nodes: headings, lists, emphasis, inline code, fenced code, quotes,
// tables, rules and http(s) links. It builds every node with createElement and puts every character in with textContent:
// nothing here parses HTML, so markup in model text (a <script>, an <img onerror>) can only ever be text.

function node(tag, text) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  return e;
}

const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__|\*(?=\S)([^*]*?\S)\*|\b_(?=\S)([^_]*?\S)_\b|\[([^\]\n]+)\]\(([^)\s]+)\)/g;

/** Appends `text` to `parent` with its inline markup drawn. */
function inline(parent, text) {
  let at = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > at) parent.append(text.slice(at, m.index));
    if (m[1]) parent.append(node("code", m[2].replace(/^ (.*) $/, "$1")));
    else if (m[3] ?? m[4]) inline(parent.appendChild(node("strong")), m[3] ?? m[4]);
    else if (m[5] ?? m[6]) inline(parent.appendChild(node("em")), m[5] ?? m[6]);
    else if (m[7]) {
      // Only web links: a javascript: or data: address stays text.
      if (/^https?:\/\//i.test(m[8])) {
        const a = parent.appendChild(node("a"));
        a.href = m[8];
        a.rel = "noopener noreferrer";
        a.target = "_blank";
        inline(a, m[7]);
      } else parent.append(m[0]);
    }
    at = m.index + m[0].length;
  }
  if (at < text.length) parent.append(text.slice(at));
}

const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+-]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const TABLE_ROW = /^\s{0,3}\|.*\|\s*$/;
const TABLE_SEP = /^\s{0,3}\|(\s*:?-+:?\s*\|)+\s*$/;

/** The cells of a table row `| a | b |`. */
function cells(line) {
  return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
}

/** A table starting at `lines[i]` (a header row, then its separator); returns the index after it. */
function table(parent, lines, i) {
  const t = parent.appendChild(node("table"));
  const aligns = cells(lines[i + 1]).map((c) => (c.endsWith(":") ? (c.startsWith(":") ? "center" : "right") : ""));
  const head = t.appendChild(node("thead")).appendChild(node("tr"));
  cells(lines[i]).forEach((c, n) => {
    const th = head.appendChild(node("th"));
    if (aligns[n]) th.style.textAlign = aligns[n];
    inline(th, c);
  });
  const body = t.appendChild(node("tbody"));
  for (i += 2; i < lines.length && TABLE_ROW.test(lines[i]); i++) {
    const tr = body.appendChild(node("tr"));
    cells(lines[i]).forEach((c, n) => {
      const td = tr.appendChild(node("td"));
      if (aligns[n]) td.style.textAlign = aligns[n];
      inline(td, c);
    });
  }
  return i;
}

/** The blocks of `lines` as nodes appended to `parent`. */
function blocks(parent, lines) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      i++;
    } else if ((m = line.match(FENCE))) {
      const pre = parent.appendChild(node("pre"));
      const code = pre.appendChild(node("code"));
      if (m[2]) code.dataset.lang = m[2];
      const body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(m[1]); i++) body.push(lines[i]);
      i++;
      code.textContent = body.join("\n");
    } else if (TABLE_ROW.test(line) && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
      i = table(parent, lines, i);
    } else if ((m = line.match(HEADING))) {
      inline(parent.appendChild(node("h" + m[1].length)), m[2]);
      i++;
    } else if (RULE.test(line)) {
      parent.append(node("hr"));
      i++;
    } else if (QUOTE.test(line)) {
      const inner = [];
      for (; i < lines.length && (m = lines[i].match(QUOTE)); i++) inner.push(m[1]);
      blocks(parent.appendChild(node("blockquote")), inner);
    } else if ((m = line.match(ITEM))) {
      i = list(parent, lines, i);
    } else {
      const text = [];
      for (; i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !HEADING.test(lines[i])
        && !QUOTE.test(lines[i]) && !(TABLE_ROW.test(lines[i]) && TABLE_SEP.test(lines[i + 1] ?? ""))
        && !(text.length && ITEM.test(lines[i])); i++) text.push(lines[i].trim());
      inline(parent.appendChild(node("p")), text.join("\n"));
    }
  }
}

/** A list starting at `lines[i]` (and its nested lists, by indentation); returns the index after it. */
function list(parent, lines, i) {
  const first = lines[i].match(ITEM);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const l = parent.appendChild(node(ordered ? "ol" : "ul"));
  if (ordered && parseInt(first[2], 10) !== 1) l.start = parseInt(first[2], 10);
  let li = null;
  while (i < lines.length) {
    const m = lines[i].match(ITEM);
    if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
      li = l.appendChild(node("li"));
      inline(li, m[3]);
      i++;
    } else if (m && m[1].length > indent && li) {
      i = list(li, lines, i);
    } else if (lines[i].trim() && li && /^\s/.test(lines[i]) && !m) {
      li.append(" ");
      inline(li, lines[i].trim());
      i++;
    } else break;
  }
  return i;
}

/** `text` rendered into `target`, replacing what it held. */
export function renderMarkdown(target, text) {
  const frag = document.createDocumentFragment();
  blocks(frag, text.replace(/\r\n?/g, "\n").split("\n"));
  target.replaceChildren(frag);
}
