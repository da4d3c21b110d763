// The lab's page logic: reads the controls, asks the wasm module (the crate's kernels) for
// every panel's data, and draws it. The latest result stays on `window.labResult`, and the
// heatmap element carries the displayed matrix as data attributes, for scripted checks.
import init, { init as openGpu, compute, load_bert, load_llama, generate } from "./pkg/lab.js";

const $ = (id) => document.getElementById(id);
const status = $("status");
let result = null;
let pinned = null;
let step = "softmax";
let busy = Promise.resolve();

function setStatus(state, text) {
  status.dataset.status = state;
  status.textContent = text;
}

function badge(el, diff, what) {
  el.textContent = `max |${what} − CPU| = ${diff.toExponential(1)}`;
  el.classList.toggle("bad", !(diff < 1e-4));
  el.dataset.diff = String(diff);
}

function request() {
  const windowed = $("windowed").checked;
  return {
    sentence: $("sentence").value,
    model: $("model").value,
    head: Number($("head").value || 0),
    layer: Number($("layer").value || 0),
    causal: $("causal").checked,
    scale: $("scale").value,
    k_equals_q: $("kq").checked,
    window: windowed ? [Number($("wleft").value), Number($("wright").value)] : null,
    cross: $("cross").value,
    words: $("words").checked,
    propagate: $("propagate").checked,
    order: $("order").value,
  };
}

function fmt(x) {
  if (x === null) return "−∞";
  return Math.abs(x) >= 100 ? x.toFixed(0) : x.toFixed(2);
}

function table(rows, colLabels, rowLabels) {
  const t = document.createElement("table");
  t.className = "m";
  const head = t.insertRow();
  head.appendChild(document.createElement("th"));
  for (const c of colLabels) {
    const th = document.createElement("th");
    th.textContent = c;
    head.appendChild(th);
  }
  rows.forEach((r, i) => {
    const tr = t.insertRow();
    const th = document.createElement("th");
    th.textContent = rowLabels[i];
    tr.appendChild(th);
    for (const x of r) {
      const td = tr.insertCell();
      td.textContent = fmt(x);
      if (x === null) td.className = "inf";
    }
  });
  return t;
}

function drawBars(row) {
  const bars = $("bars");
  bars.innerHTML = "";
  if (row === null || !result) return;
  const weights = result.matrix[row];
  bars.dataset.row = String(row);
  bars.dataset.weights = JSON.stringify(weights);
  result.tokens.forEach((t, j) => {
    const div = document.createElement("div");
    div.className = "bar";
    div.dataset.weight = String(weights[j]);
    div.innerHTML = `<span class="label"></span><span class="fill"></span><span class="v"></span>`;
    div.querySelector(".label").textContent = t;
    div.querySelector(".fill").style.width = `${(weights[j] * 16).toFixed(2)}rem`;
    div.querySelector(".v").textContent = weights[j] === 0 ? "masked" : weights[j].toFixed(3);
    bars.appendChild(div);
  });
}

function drawStrip() {
  const strip = $("strip");
  strip.innerHTML = "";
  result.tokens.forEach((t, i) => {
    const b = document.createElement("button");
    b.textContent = t;
    b.dataset.index = String(i);
    b.classList.toggle("pinned", pinned === i);
    b.addEventListener("mouseenter", () => pinned === null && drawBars(i));
    b.addEventListener("mouseleave", () => pinned === null && drawBars(null));
    b.addEventListener("click", () => {
      pinned = pinned === i ? null : i;
      drawStrip();
      drawBars(pinned ?? i);
    });
    strip.appendChild(b);
  });
}

function drawStep() {
  document.querySelectorAll(".steps button").forEach((b) => b.classList.toggle("active", b.dataset.step === step));
  const s = result.steps;
  // The steps show the head's own tensors, per token, also in the word view.
  const toks = result.step_tokens || result.tokens;
  const notes = {
    qk: `Q·Kᵀ: dot products of head ${result.head}'s queries with key/value head ${result.kv_head}'s keys (d_k = ${result.head_dim}).`,
    scaled: `× ${result.scale_label}: keeps the logits' spread independent of d_k.`,
    masked: result.causal ? "Masked: keys after the query are −∞ (causal)." : "Mask: cells not allowed by the mask, window or causal rule become −∞.",
    softmax: "Softmax per row (the kernel's result): each row sums to 1.",
    out: `·V: each query's output is its weights times the values (${result.head_dim} columns). max |GPU − CPU| = ${s.out_badge.toExponential(1)}`,
  };
  $("stepnote").textContent = notes[step];
  const el = $("step");
  el.innerHTML = "";
  const cols = step === "out" ? [...Array(result.head_dim).keys()].map((c) => `v${c}`) : toks;
  el.appendChild(table(s[step], cols, toks));
}

function drawCache(rows) {
  const m = result.cache.matrix.map((r, i) => r.map((x, j) => (i < rows && j <= i ? x : null)));
  const el = $("cache");
  el.innerHTML = "";
  const toks = result.step_tokens || result.tokens;
  const t = table(m.slice(0, rows), toks, toks);
  t.dataset.rows = String(rows);
  el.appendChild(t);
  if (result.cache.keys) {
    // What the cache holds after `rows` tokens: one key (and value) row per token so far.
    const cap = document.createElement("p");
    cap.className = "hint";
    cap.textContent = `the cache after ${rows} token${rows === 1 ? "" : "s"}: keys of key/value head ${result.kv_head} (first ${result.cache.keys[0].length} of ${result.head_dim} dims)`;
    el.appendChild(cap);
    const keys = table(result.cache.keys.slice(0, rows), result.cache.keys[0].map((_, c) => `k${c}`), toks);
    keys.id = "cachekeys";
    keys.dataset.rows = String(rows);
    el.appendChild(keys);
  }
}

function options(select, n, word, chosen) {
  if (select.options.length !== n) {
    select.innerHTML = "";
    for (let i = 0; i < n; i++) select.add(new Option(`${word} ${i}`, String(i)));
  }
  select.value = String(chosen);
}

// Panels fed by one head's real tensors. Without them (a loaded model without WebGPU)
// each says why; the switches then have nothing to recompute.
function headPanels(show, why) {
  $("whatif").style.opacity = show ? 1 : 0.4;
  for (const id of ["step", "crossmap", "cache"]) {
    if (!show) $(id).textContent = `(${why})`;
  }
  if (!show) for (const id of ["crossbadge", "cachebadge"]) $(id).textContent = "";
}

// Heads at a glance (a loaded model): one row per layer × head, in the model view's
// order; clicking a row picks that head.
function drawHeadTable() {
  const box = $("headtable");
  box.textContent = "";
  const stats = result.head_stats;
  $("orderrow").hidden = !stats || result.layers === undefined;
  if (!stats) return;
  const byKey = new Map(stats.map((s) => [`${s.layer},${s.head}`, s]));
  const t = document.createElement("table");
  t.className = "m heads";
  const head = t.insertRow();
  for (const c of ["layer", "head", "entropy (nats)", "→ previous", "→ first", "nearest head", "JS distance"]) {
    const th = document.createElement("th");
    th.textContent = c;
    head.appendChild(th);
  }
  for (const [l, h] of result.order) {
    const s = byKey.get(`${l},${h}`);
    const row = t.insertRow();
    row.dataset.layer = String(l);
    row.dataset.head = String(h);
    const cells = [l, h, s.entropy.toFixed(3), s.previous_token.toFixed(3), s.first_token.toFixed(3),
      s.nearest ? `L${s.nearest[0]} H${s.nearest[1]}` : "—", s.distance === null ? "—" : s.distance.toFixed(3)];
    for (const c of cells) row.insertCell().textContent = String(c);
    if (l === result.layer && h === result.head) row.classList.add("picked");
    row.addEventListener("click", () => {
      $("layer").value = String(l);
      $("head").value = String(h);
      schedule();
    });
  }
  box.appendChild(t);
}

// The side-by-side of a loaded model's head: as trained, with the switches, and the
// difference.
function drawWhatIf() {
  const panel = $("wipanel");
  const w = result.whatif;
  panel.hidden = !w;
  if (!w) return;
  $("wi-original").innerHTML = w.svg_original;
  $("wi-changed").innerHTML = w.svg_changed;
  $("wi-diff").innerHTML = w.svg_diff;
  panel.dataset.active = String(w.active);
  panel.dataset.changed = JSON.stringify(w.changed);
  panel.dataset.original = JSON.stringify(w.original);
  $("wi-note").textContent = w.active
    ? `The switches change this trained head: the largest change of a weight is ${w.max_change.toFixed(3)}. ` +
      `Recomputed from layer ${result.layer}'s real q, k and v in ${result.head_ms.toFixed(0)} ms ` +
      `(${result.pass_reused ? "the forward pass kept" : "after a new forward pass"}).`
    : "The switches are the model's own computation: flip one above to see this head change.";
  const p = result.propagate;
  const out = $("wi-propagate");
  out.innerHTML = "";
  delete out.dataset.shift;
  if (!p) return;
  out.dataset.shift = JSON.stringify(p.shift);
  out.dataset.shiftCpu = JSON.stringify(p.shift_cpu);
  out.dataset.badge = String(p.badge);
  const note = document.createElement("p");
  note.className = "hint";
  note.textContent = `The rest of the model run on the changed head (${p.ms.toFixed(0)} ms): how far each ` +
    `token's final hidden state moved (L2), max |GPU − float64| = ${p.hidden_badge.toExponential(1)}.`;
  out.appendChild(note);
  const toks = result.step_tokens || result.tokens;
  const max = Math.max(...p.shift, 1e-9);
  p.shift.forEach((d, i) => {
    const row = document.createElement("div");
    row.className = "bar";
    row.innerHTML = `<span class="label"></span><span class="fill"></span><span class="v"></span>`;
    row.querySelector(".label").textContent = toks[i];
    row.querySelector(".fill").style.width = `${(d / max * 16).toFixed(2)}rem`;
    row.querySelector(".v").textContent = d.toFixed(4);
    out.appendChild(row);
  });
  if (p.top_before) {
    const fmtTop = (t) => t.map((x) => `${JSON.stringify(x.text)} ${(x.p * 100).toFixed(1)}%`).join(", ");
    const t = document.createElement("p");
    t.id = "wi-top";
    t.textContent = `next token before: ${fmtTop(p.top_before)} · after: ${fmtTop(p.top_after)}`;
    out.appendChild(t);
  }
}

function draw() {
  options($("head"), result.heads, "head", result.head);
  options($("layer"), result.layers || 1, "layer", result.layer || 0);
  const hm = $("heatmap");
  hm.innerHTML = result.svg;
  hm.dataset.matrix = JSON.stringify(result.matrix);
  hm.dataset.tokens = JSON.stringify(result.tokens);
  hm.dataset.words = String(Boolean(result.words));
  hm.dataset.q = JSON.stringify(result.q);
  hm.dataset.k = JSON.stringify(result.k);
  hm.dataset.scale = String(result.scale);
  hm.dataset.causal = String(result.causal);
  badge($("badge"), result.badge, result.backend === "webgpu" ? "GPU" : "shown");
  $("grid").innerHTML = result.grid_svg;
  badge($("gridbadge"), Math.max(...result.grid_badges), "GPU");
  drawHeadTable();
  // A real model's pass reports its own time (the built-in embedding has none).
  const ft = $("forwardtime");
  if (result.forward_ms !== undefined) {
    const where = result.backend === "webgpu" ? "WebGPU" : "the fast CPU path (no WebGPU)";
    const n = result.token_labels.length;
    const tps = n / (result.forward_ms / 1000);
    ft.textContent = `forward pass on ${where}: ${result.forward_ms.toFixed(0)} ms for ` +
      `${n} tokens (${tps.toFixed(1)} tokens/s in this browser)` +
      (result.inputs_ms ? `; every layer's q, k and v kept for the what-if: ${result.inputs_ms.toFixed(0)} ms` : "") +
      `; the float64 reference it is badged against: ${result.reference_ms.toFixed(0)} ms` +
      (result.head_ms !== undefined ? `; this request: ${result.pass_reused ? "pass kept, " : ""}` +
        `head work ${result.head_ms.toFixed(0)} ms` : "");
    ft.dataset.ms = String(result.forward_ms);
    ft.dataset.tokensPerSecond = String(tps);
    ft.dataset.headMs = String(result.head_ms);
  } else {
    ft.textContent = "";
    delete ft.dataset.ms;
  }
  if (pinned !== null && pinned >= result.tokens.length) pinned = null;
  drawStrip();
  drawBars(pinned);
  drawWhatIf();
  if (!result.steps) {
    headPanels(false, result.real_panels || "no head tensors");
    return;
  }
  headPanels(true);
  if (result.cross) {
    $("crossmap").innerHTML = result.cross.svg;
    badge($("crossbadge"), result.cross.badge, "GPU");
  } else {
    $("crossmap").textContent = "(type a sentence for the keys and values)";
    $("crossbadge").textContent = "";
  }
  if (result.cache) {
    badge($("cachebadge"), result.cache.badge, "GPU");
    drawCache((result.step_tokens || result.tokens).length);
  } else {
    $("cache").textContent = `(${result.cache_note})`;
    $("cachebadge").textContent = "";
  }
  drawStep();
}

async function recompute() {
  setStatus("running", "computing…");
  const t0 = performance.now();
  try {
    result = JSON.parse(await compute(JSON.stringify(request())));
    window.labResult = result;
    draw();
    const ms = (performance.now() - t0).toFixed(0);
    setStatus("done", `${result.backend === "webgpu" ? "WebGPU" : "CPU (no WebGPU in this browser)"} · ${result.tokens.length} ${result.words ? "words" : "tokens"} · ${ms} ms`);
  } catch (e) {
    setStatus("error", `error: ${e}`);
  }
}

// Figures that export: the same SVG the command line's `heatmap` writes (the crate's own
// drawing code), and a PNG rasterised from it by the browser.
const FIGURES = ["heatmap", "wi-original", "wi-changed", "wi-diff", "grid", "crossmap", "pair-a", "pair-b", "pair-diff", "longmap", "longzoom"];
window.labExports = {};

function download(name, url) {
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
}

async function exportFigure(id, kind) {
  const svg = $(id).querySelector("svg");
  if (!svg) throw new Error(`${id}: nothing drawn to save`);
  const text = new XMLSerializer().serializeToString(svg);
  const svgUrl = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(text)}`;
  let url = svgUrl;
  if (kind === "png") {
    const img = new Image();
    await new Promise((ok, fail) => { img.onload = ok; img.onerror = () => fail(new Error(`${id}: the SVG did not render`)); img.src = svgUrl; });
    const canvas = document.createElement("canvas");
    canvas.width = Math.ceil(Number(svg.getAttribute("width")) || img.width);
    canvas.height = Math.ceil(Number(svg.getAttribute("height")) || img.height);
    const g = canvas.getContext("2d");
    g.fillStyle = "white";
    g.fillRect(0, 0, canvas.width, canvas.height);
    g.drawImage(img, 0, 0, canvas.width, canvas.height);
    url = canvas.toDataURL("image/png");
  }
  const name = `lab-${id}.${kind}`;
  window.labExports[name] = url;
  download(name, url);
}

function exportButtons() {
  for (const id of FIGURES) {
    const bar = document.createElement("div");
    bar.className = "exports";
    for (const kind of ["svg", "png"]) {
      const b = document.createElement("button");
      b.className = "export";
      b.dataset.target = id;
      b.dataset.kind = kind;
      b.textContent = `save ${kind.toUpperCase()}`;
      b.addEventListener("click", () => exportFigure(id, kind).catch((e) => setStatus("error", `error: ${e}`)));
      bar.appendChild(b);
    }
    $(id).before(bar);
  }
}

// The long-text panel: the pooled map of the chosen layer and head, and a zoomed cell.
let long = null;
async function runLong(zoom) {
  if ($("model").value === "builtin") {
    $("longinfo").textContent = "(load MiniLM or SmolLM2 in the model picker: the long view runs a real model)";
    return;
  }
  setStatus("running", zoom ? "zooming…" : "pooling…");
  try {
    const req = { ...request(), mode: "long", long: $("longtext").value, pool: Number($("longpool").value), zoom: zoom || null, expose: !!window.labLongExpose };
    long = JSON.parse(await compute(JSON.stringify(req)));
    window.labLong = long;
    const map = $("longmap");
    map.innerHTML = long.svg;
    map.dataset.map = JSON.stringify(long.map);
    badge($("longbadge"), Math.max(long.map_badge, long.entropy_badge, long.zoom ? long.zoom.badge : 0), "GPU");
    const kib = (long.device_bytes / 1024).toFixed(0);
    $("longinfo").textContent = `${long.tokens} tokens, layer ${long.layer} head ${long.head}: ` +
      `${long.pool[0]} × ${long.pool[1]} cells in ${long.patterns_ms.toFixed(0)} ms ` +
      `(q, k, v of every layer from one pass: ${long.forward_ms.toFixed(0)} ms); ` +
      `device memory for this view: ${kib} KiB (q and k of the layer, the map, the entropy and the ` +
      `row statistics; every weight would take ${((long.tokens * long.tokens * 4) / 1024).toFixed(0)} KiB)` +
      (long.zoom ? `; zoom recomputed exactly in ${long.zoom.ms.toFixed(0)} ms` : "");
    $("longinfo").dataset.bytes = String(long.device_bytes);
    $("longzoom").innerHTML = long.zoom ? long.zoom.svg : "";
    setStatus("done", `pooled ${long.tokens} tokens`);
  } catch (e) {
    setStatus("error", `error: ${e}`);
  }
}
// Two prompts side by side: A, B and A − B for the chosen layer and head.
async function runPair() {
  setStatus("running", "comparing two prompts…");
  try {
    const req = { ...request(), mode: "pair", pair: [$("pairA").value, $("pairB").value] };
    const p = JSON.parse(await compute(JSON.stringify(req)));
    window.labPair = p;
    $("pair-a").innerHTML = p.svg_a;
    $("pair-b").innerHTML = p.svg_b;
    $("pair-diff").innerHTML = p.svg_diff;
    badge($("pairbadge"), p.badge, result && result.backend === "webgpu" ? "GPU" : "shown");
    const la = p.a.length, lb = p.b.length;
    $("pairinfo").textContent = (p.same_length
      ? `Both have ${la} tokens. `
      : `A has ${la} tokens and B ${lb}: the difference covers their first ${p.common} positions. `) +
      `The largest change of a weight is ${p.max_diff.toFixed(3)}.`;
    setStatus("done", "compared");
  } catch (e) {
    setStatus("error", `error: ${e}`);
  }
}
window.labComparePair = () => { busy = busy.then(runPair); return busy; };

window.labZoom = (r, c) => { busy = busy.then(() => runLong([r, c])); return busy; };

function schedule() {
  busy = busy.then(recompute);
  return busy;
}
window.labRecompute = schedule;

// Real models the local server offers (serve.sh links the fetched ones in).
async function offerModels() {
  let index = [];
  try {
    const r = await fetch("models/index.json");
    if (r.ok) index = await r.json();
  } catch (_) { /* none served */ }
  for (const m of index) $("model").add(new Option(m.label, m.name));
  $("modelnote").textContent = index.length ? "" : "(run scripts/fetch-models.sh, then serve.sh, for MiniLM and SmolLM2)";
  return index;
}

async function bytes(path) {
  const r = await fetch(path);
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return new Uint8Array(await r.arrayBuffer());
}

// The panels computed on request (two prompts, the long text) belong to the model that
// computed them: a new model empties them until they are asked for again.
function clearRequested() {
  for (const id of ["pair-a", "pair-b", "pair-diff", "longmap", "longzoom"]) $(id).innerHTML = "";
  for (const id of ["pairbadge", "longbadge"]) {
    $(id).textContent = "";
    delete $(id).dataset.diff;
  }
  $("pairinfo").textContent = "Press Compare to draw this pair on the model picked above.";
  $("longinfo").textContent = "";
  window.labPair = undefined;
}

// Runs inside the `busy` chain (the model picker's change handler queues it), so it
// recomputes directly: queueing on `busy` from inside it would wait for itself.
async function pickModel(index) {
  const name = $("model").value;
  pinned = null;
  clearRequested();
  $("generate").disabled = true;
  if (name === "builtin") return recompute();
  const m = index.find((x) => x.name === name);
  setStatus("loading", `loading ${m.label}…`);
  try {
    const t0 = performance.now();
    const files = await Promise.all(m.files.map((f) => bytes(f)));
    const mb = files.reduce((n, f) => n + f.length, 0) / 1e6;
    const t1 = performance.now();
    setStatus("loading", `loading ${m.label}: ${mb.toFixed(0)} MB fetched, reading the weights…`);
    await new Promise((ok) => setTimeout(ok, 0));
    const info = JSON.parse(m.kind === "bert" ? load_bert(...files) : load_llama(files[0]));
    const t2 = performance.now();
    status.dataset.load = JSON.stringify({ mb, fetch_ms: t1 - t0, load_ms: t2 - t1, read_ms: info.read_ms, upload_ms: info.upload_ms });
    $("generate").disabled = !info.causal;
    $("causal").checked = info.causal;
    $("scale").value = "sqrt";
    $("kq").checked = false;
    $("windowed").checked = false;
  } catch (e) {
    return setStatus("error", `error: ${e}`);
  }
  return recompute();
}

async function runGeneration() {
  const out = $("genout");
  const table = $("gencache");
  out.textContent = $("sentence").value;
  table.innerHTML = "";
  setStatus("running", "generating…");
  const speed = $("genspeed");
  speed.textContent = "";
  const t0 = performance.now();
  let first = null, last = null, count = 0, prompt = 0;
  const sink = {
    push(text, cached) {
      last = performance.now();
      if (first === null) { first = last; prompt = cached; }
      count += 1;
      out.textContent += text;
      const row = document.createElement("div");
      row.className = "bar";
      row.dataset.cached = String(cached);
      row.innerHTML = `<span class="label"></span><span class="fill"></span><span class="v"></span>`;
      row.querySelector(".label").textContent = JSON.stringify(text);
      row.querySelector(".fill").style.width = `${Math.min(30, cached * 0.4).toFixed(1)}rem`;
      row.querySelector(".v").textContent = `cache holds ${cached + 1} positions`;
      table.appendChild(row);
    },
  };
  try {
    await generate($("sentence").value, 16, sink);
    if (count > 0) {
      // The first token comes with the prompt's pass; the rest are one cached step each.
      const promptS = (first - t0) / 1000;
      const stepTps = count > 1 ? (count - 1) / ((last - first) / 1000) : 0;
      speed.textContent = `prompt of ${prompt} tokens and the first new one: ${promptS.toFixed(2)} s ` +
        `(${(prompt / promptS).toFixed(1)} tokens/s); then ${count - 1} tokens at ${stepTps.toFixed(2)} ` +
        `tokens/s with the KV cache, in this browser`;
      speed.dataset.promptTokens = String(prompt);
      speed.dataset.promptSeconds = String(promptS);
      speed.dataset.tokensPerSecond = String(stepTps);
    }
    setStatus("done", `generated ${count} tokens`);
  } catch (e) {
    setStatus("error", `error: ${e}`);
  }
}

async function main() {
  if (!("gpu" in navigator)) {
    status.textContent = "This browser has no WebGPU: running the CPU path.";
  }
  await init();
  const gpu = await openGpu();
  document.body.dataset.backend = gpu.startsWith("webgpu") ? "webgpu" : "cpu";
  if (!gpu.startsWith("webgpu")) {
    $("status").title = gpu;
  }
  $("preset").addEventListener("change", (e) => {
    const opt = e.target.selectedOptions[0];
    if (!opt.value) return;
    $("sentence").value = opt.value;
    $("causal").checked = opt.dataset.causal === "1";
    $("cross").value = opt.dataset.cross || "";
    schedule();
  });
  exportButtons();
  $("longrun").addEventListener("click", () => { busy = busy.then(() => runLong(null)); });
  $("pairrun").addEventListener("click", () => window.labComparePair());
  $("pairpick").addEventListener("change", (e) => {
    if (!e.target.value) return;
    [$("pairA").value, $("pairB").value] = e.target.value.split("|");
    window.labComparePair();
  });
  $("longmap").addEventListener("click", (e) => {
    const svg = $("longmap").querySelector("svg");
    if (!svg || !long) return;
    const box = svg.getBoundingClientRect();
    const x = (e.clientX - box.left) * (Number(svg.getAttribute("width")) / box.width);
    const y = (e.clientY - box.top) * (Number(svg.getAttribute("height")) / box.height);
    const r = Math.floor((y - long.grid.y) / long.grid.cell);
    const c = Math.floor((x - long.grid.x) / long.grid.cell);
    if (r >= 0 && c >= 0 && r < long.pool[0] && c < long.pool[1]) window.labZoom(r, c);
  });
  const index = await offerModels();
  $("model").addEventListener("change", () => { busy = busy.then(() => pickModel(index)); });
  $("generate").addEventListener("click", () => { busy = busy.then(runGeneration); });
  for (const id of ["run"]) $(id).addEventListener("click", schedule);
  for (const id of ["order", "head", "layer", "causal", "scale", "kq", "windowed", "wleft", "wright", "words", "propagate"]) {
    $(id).addEventListener("change", schedule);
  }
  for (const id of ["sentence", "cross"]) {
    $(id).addEventListener("keydown", (e) => e.key === "Enter" && schedule());
  }
  document.querySelectorAll(".steps button").forEach((b) =>
    b.addEventListener("click", () => { step = b.dataset.step; drawStep(); }));
  $("play").addEventListener("click", async () => {
    for (let r = 1; r <= (result.step_tokens || result.tokens).length; r++) {
      drawCache(r);
      await new Promise((ok) => setTimeout(ok, 350));
    }
  });
  await schedule();
}

main().catch((e) => setStatus("error", `error: ${e}`));
