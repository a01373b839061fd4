// The events inspector: every journaled event with its sequence id, in a virtualised list (only the rows in view
// are in the page), so a session of 100,000 events scrolls as lightly as one of ten.

const ROW = 24; // px; must match .events .row in app.css
const OVERSCAN = 10;

function newRow() {
  const row = document.createElement("div");
  row.setAttribute("role", "option");
  for (const cls of ["seq", "type", "time", "body"]) {
    const span = document.createElement("span");
    span.className = cls;
    row.append(span);
  }
  return row;
}

export class Inspector {
  constructor(root, detail, count) {
    this.root = root;
    this.detail = detail;
    this.count = count;
    this.events = [];
    this.shown = 0;
    this.selected = -1;
    this.spacer = document.createElement("div");
    this.spacer.className = "spacer";
    this.rows = document.createElement("div");
    this.rows.className = "rows";
    this.rows.setAttribute("role", "listbox");
    this.rows.setAttribute("aria-label", "Events");
    root.append(this.spacer, this.rows);
    this.pending = false;
    root.addEventListener("scroll", () => this.schedule());
    root.addEventListener("keydown", (e) => this.key(e));
    this.rows.addEventListener("click", (e) => {
      const row = e.target.closest(".row");
      if (row) this.select(Number(row.dataset.index));
    });
  }

  reset() {
    this.events = [];
    this.shown = 0;
    this.selected = -1;
    this.detail.textContent = "";
    this.schedule();
  }

  /** Adds an event; reads no layout, so a replay of thousands costs one layout per frame, not one per event. */
  push(msg) {
    this.events.push(msg);
    this.schedule();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  render() {
    // Follow the end when the view was at the end of what it last showed.
    const atEnd = this.root.scrollTop + this.root.clientHeight >= this.shown * ROW - ROW;
    const n = this.events.length;
    this.shown = n;
    const last = n ? this.events[n - 1].id : "none";
    this.count.textContent = `${n} events, last #${last}`;
    this.count.dataset.count = String(n);
    this.count.dataset.last = String(last);
    this.spacer.style.height = `${n * ROW}px`;
    if (atEnd && this.root.offsetParent !== null) this.root.scrollTop = n * ROW;
    const height = this.root.clientHeight || 400;
    const first = Math.max(0, Math.floor(this.root.scrollTop / ROW) - OVERSCAN);
    const end = Math.min(n, Math.ceil((this.root.scrollTop + height) / ROW) + OVERSCAN);
    this.rows.style.transform = `translateY(${first * ROW}px)`;
    // Rows are reused, not rebuilt: scrolling changes their text, and a row the user is on stays the same node.
    const want = end - first;
    while (this.rows.children.length > want) this.rows.lastChild.remove();
    while (this.rows.children.length < want) this.rows.append(newRow());
    for (let k = 0; k < want; k++) {
      const i = first + k;
      const e = this.events[i];
      const row = this.rows.children[k];
      row.className = "row" + (i === this.selected ? " selected" : "");
      row.dataset.index = String(i);
      row.setAttribute("aria-selected", String(i === this.selected));
      const [seq, type, time, body] = row.children;
      seq.textContent = "#" + e.id;
      type.textContent = e.payload.type;
      time.textContent = (e.created_at || "").slice(11, 23);
      body.textContent = JSON.stringify(e.payload.payload).slice(0, 200);
    }
  }

  select(i) {
    if (i < 0 || i >= this.events.length) return;
    this.selected = i;
    this.detail.textContent = JSON.stringify(this.events[i], null, 2);
    const top = i * ROW;
    if (top < this.root.scrollTop) this.root.scrollTop = top;
    else if (top + ROW > this.root.scrollTop + this.root.clientHeight) this.root.scrollTop = top + ROW - this.root.clientHeight;
    this.render();
  }

  key(e) {
    const page = Math.max(1, Math.floor(this.root.clientHeight / ROW) - 1);
    const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page };
    if (e.key in moves) {
      this.select(Math.min(this.events.length - 1, Math.max(0, (this.selected < 0 ? 0 : this.selected) + moves[e.key])));
    } else if (e.key === "Home") {
      this.select(0);
    } else if (e.key === "End") {
      this.select(this.events.length - 1);
    } else {
      return;
    }
    e.preventDefault();
  }
}
