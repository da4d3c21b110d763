#!/usr/bin/env python3
"""The attention lab's browser test: serves examples/lab on 127.0.0.1, drives it in
headless Chromium through ChromeDriver (WebDriver over HTTP, standard library only) and
checks what the page shows against an independent float64 computation:

- the heatmap's matrix equals softmax(scale * q kᵀ) of the head's own q and k (which the
  page exposes) within 1e-5, its rows sum to 1, and its CPU badge is below 1e-4;
- clicking a word draws bars equal to that word's row;
- switching causal on makes the upper triangle exactly 0 and draws −∞ cells;
- cross-attention and the KV-cache panel agree with the CPU path (their badges);
- the word switch: "the cat ate the fish; it was delicious" shows one row per
  whitespace-delimited word ("fish;" one word of two tokens), each row summing to 1 and
  equal within 1e-6 to a float64 aggregation (keys summed, queries averaged) of the token
  matrix, the causal upper triangle staying exactly 0;
- every figure's "save SVG" and "save PNG" (heatmap, model view, cross-attention, and on
  a loaded model the what-if side-by-side) downloads a valid SVG of the figure shown and
  a PNG of its size;
- the long-text panel on MiniLM (WebGPU): the pooled map of a 200-token text equals the
  full matrix rebuilt in float64 from the head's exposed q and k and pooled, its rows sum to 1, the row
  entropies equal the full matrix's, and a zoomed cell equals that region of the matrix;
- the page made no request outside 127.0.0.1;
- with the fetched MiniLM served (serve.sh links scripts/fetch-models.sh's files): the
  page loads it, and layers and heads of "The cat sat on the mat" equal the numpy float64
  forward pass of tests/fixtures/models/bert within 2e-4 + 1e-3·|ref|, the page's badge
  (GPU against the CPU pass computed in the page) is below 2e-4 for every layer and head,
  its tokens run [CLS] ... [SEP], and clicking "cat" draws bars equal to its row; the
  lecture's Korean sentence reads as Korean along the heatmap's axes (every syllable, in
  order, no byte symbol) and its word view has the sentence's five words between [CLS]
  and [SEP];
- on the loaded MiniLM's real layer 0 head 0 (WebGPU): causal on, scale "none" and K = Q
  each give a heatmap equal to a float64 softmax of the page's exposed q and k (the head's
  real tensors) with that rule, recomputed without a new forward pass; the side-by-side
  keeps the trained head and its difference panel is changed - trained; the
  step-through's softmax equals the heatmap; "propagate" moves the final hidden states
  by what an independent numpy float64 forward pass of the checkpoint (reference.py) with
  the same head changed says, and by what the crate's own float64 pass says; cross-attention with another sentence's keys
  and values agrees with the CPU (its badge); the same on SmolLM2 (causal off instead),
  whose cache panel's rows equal the causal head and grow one key row per token;
- with LAB_SMOLLM2=1 and SmolLM2 served: its attention on "I love AI !" equals the numpy
  fixture of tests/fixtures/models/llama, the upper triangle is 0, and greedy generation
  after "The capital of France is" streams numpy's greedy tokens one at a time, the KV
  cache growing by one position per token.

Screenshots go to OUT_DIR (default: the current directory).

    python3 examples/lab/check.py [OUT_DIR]

Env: CHROMEDRIVER (default /usr/bin/chromedriver), WEBGPU=0 to launch without WebGPU
(the page must then say so and run the CPU path), LAB_MODELS=0 to skip the real models,
LAB_SMOLLM2=1 to check SmolLM2 too. On failure the browser's console is printed.
"""

import ast
import base64
import importlib.util
import json
import math
import os
import struct
import subprocess
import sys
import time
import urllib.error

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("webcheck", os.path.join(HERE, "..", "web", "check.py"))
web = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(web)
sys.path.insert(0, HERE)
try:
    import reference  # numpy float64 forward passes of the real models (needs numpy)
except ImportError as e:
    reference = None
    REFERENCE_ERROR = str(e)

# The checkpoint files serve.sh links into models/ (from scripts/fetch-models.sh).
MODEL_FILES = {
    "minilm": {"model": os.path.join(HERE, "models", "minilm-model.safetensors"),
               "config": os.path.join(HERE, "models", "minilm-config.json")},
    "smollm2": {"model": os.path.join(HERE, "models", "smollm2.gguf")},
}


class Page:
    def __init__(self, base, session):
        self.base, self.s = base, f"/session/{session}"

    def js(self, script, *args):
        return web.call(self.base, "POST", self.s + "/execute/sync", {"script": script, "args": list(args)})

    def wait_done(self, what, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                state, text = self.js("const e = document.getElementById('status');"
                                      "return [e.dataset.status, e.textContent];")
            except urllib.error.HTTPError as e:
                # The page's thread is busy in a long synchronous wasm call (a model's
                # load): the script times out; ask again.
                print(f"{what}: page busy ({e.code}: {e.read()[:200]!r}), waiting")
                time.sleep(1)
                continue
            if state == "done":
                return text
            if state == "error":
                raise SystemExit(f"{what}: the page reports {text}")
            time.sleep(0.25)
        raise SystemExit(f"{what}: the page did not finish in {timeout} s")

    def recompute(self, what):
        # Mark the status first so a stale "done" is not read as this run's.
        self.js("document.getElementById('status').dataset.status = 'running';"
                "window.labRecompute();")
        return self.wait_done(what)

    def click(self, css):
        el = web.call(self.base, "POST", self.s + "/element", {"using": "css selector", "value": css})
        key = next(iter(el))
        web.call(self.base, "POST", f"{self.s}/element/{el[key]}/click", {})

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(web.call(self.base, "GET", self.s + "/screenshot")))
        print(f"screenshot: {path}")


def print_console(page):
    """The browser console so far (wasm panics land there), for a failing check."""
    try:
        entries = web.call(page.base, "POST", page.s + "/se/log", {"type": "browser"})
    except OSError as e:
        print(f"(no browser log: {e})")
        return
    for e in entries or []:
        print(f"console {e.get('level')}: {e.get('message')}")


def softmax_rows(q, k, scale, causal):
    rows = []
    for i, qi in enumerate(q):
        logits = [scale * sum(a * b for a, b in zip(qi, kj)) for kj in k]
        allowed = [not causal or j <= i for j in range(len(k))]
        m = max(x for x, ok in zip(logits, allowed) if ok)
        e = [math.exp(x - m) if ok else 0.0 for x, ok in zip(logits, allowed)]
        s = sum(e)
        rows.append([x / s for x in e])
    return rows


def check_matrix(page, what, causal):
    data = page.js("const d = document.getElementById('heatmap').dataset;"
                   "return [d.matrix, d.q, d.k, d.scale, d.causal,"
                   " document.getElementById('badge').dataset.diff];")
    matrix, q, k = (json.loads(x) for x in data[:3])
    scale, shown_causal, badge = float(data[3]), data[4] == "true", float(data[5])
    assert shown_causal == causal, f"{what}: causal is {shown_causal}"
    want = softmax_rows(q, k, scale, causal)
    worst = max(abs(a - b) for r, w in zip(matrix, want) for a, b in zip(r, w))
    assert worst < 1e-5, f"{what}: shown matrix differs from float64 softmax(q kᵀ) by {worst}"
    for i, r in enumerate(matrix):
        assert abs(sum(r) - 1) < 1e-5, f"{what}: row {i} sums to {sum(r)}"
    assert badge < 1e-4, f"{what}: CPU badge {badge}"
    print(f"{what}: {len(matrix)}x{len(matrix[0])} matrix within {worst:.1e} of float64; badge {badge:.1e}")
    return matrix


def read_npy_f32(path):
    """A little-endian float32 C-order .npy as (shape, flat list): enough for fixtures."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    header_len = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + header_len].decode("latin1"))
    assert header["descr"] == "<f4" and not header["fortran_order"], header
    n = math.prod(header["shape"])
    body = data[10 + header_len:]
    return header["shape"], list(struct.unpack(f"<{n}f", body[:4 * n]))


def load_model(page, name, sentence):
    """Picks a served real model in the page's model picker; returns the load timings."""
    t0 = time.time()
    page.js("const m = document.getElementById('model'); m.value = arguments[0];"
            "document.getElementById('sentence').value = arguments[1];"
            "document.getElementById('status').dataset.status = 'running';"
            "m.dispatchEvent(new Event('change'));", name, sentence)
    text = page.wait_done(f"{name} load", timeout=600)
    load = json.loads(page.js("return document.getElementById('status').dataset.load;"))
    print(f"{name}: {load['mb']:.0f} MB fetched in {load['fetch_ms'] / 1e3:.1f} s, read in "
          f"{load['read_ms'] / 1e3:.1f} s, uploaded in {load['upload_ms'] / 1e3:.1f} s; "
          f"first pass (GPU and the page's CPU reference): {text} ({time.time() - t0:.1f} s in all)")
    # The panels drawn on request belong to the model that drew them: a new model empties them.
    stale = page.js("return ['pair-a', 'pair-b', 'pair-diff', 'longmap', 'longzoom']"
                    ".filter((id) => document.getElementById(id).innerHTML !== '');")
    assert not stale, f"{name}: {stale} still show the previous model's figures"


def check_rows(page, what, ref, shape, picks, tol):
    """The page's matrix for each (layer, head) in `picks` against a float64 fixture
    `ref` of `shape` (layers, heads, L, L), and the page's own GPU-vs-CPU badge."""
    layers, heads, l, _ = shape
    worst = 0.0
    for layer, head in picks:
        page.js("document.getElementById('layer').value = arguments[0];"
                "document.getElementById('head').value = arguments[1];", str(layer), str(head))
        page.recompute(f"{what} layer {layer} head {head}")
        r = page.js("return window.labResult;")
        assert (r["layer"], r["head"]) == (layer, head), (r["layer"], r["head"])
        m = json.loads(page.js("return document.getElementById('heatmap').dataset.matrix;"))
        assert len(m) == l, f"{what}: {len(m)} tokens, the reference has {l}"
        for i in range(l):
            for j in range(l):
                want = ref[((layer * heads + head) * l + i) * l + j]
                err = abs(m[i][j] - want)
                assert err <= tol + 1e-3 * abs(want), f"{what} L{layer} H{head} ({i},{j}): {m[i][j]} vs {want}"
                worst = max(worst, err)
        badge = float(page.js("return document.getElementById('badge').dataset.diff;"))
        assert badge < 2e-4, f"{what}: GPU vs the page's CPU pass, badge {badge}"
    grid = float(page.js("return document.getElementById('gridbadge').dataset.diff;"))
    assert grid < 2e-4, f"{what}: every layer x head vs the page's CPU pass: {grid}"
    print(f"{what}: {len(picks)} layer/head matrices within {worst:.1e} of numpy float64; "
          f"every layer x head within {grid:.1e} of the page's CPU pass")
    return r, m


KOREAN = "고양이가 생선을 먹었다 그것은 맛있었다"


def aggregate_words(m, ranges):
    """The word view of token matrix `m` in float64: keys summed, queries averaged."""
    return [[sum(sum(m[i][j] for j in range(k0, k1)) for i in range(q0, q1)) / (q1 - q0)
             for (k0, k1) in ranges] for (q0, q1) in ranges]


def svg_axis_labels(svg):
    """The key labels (turned -45 degrees) of a heatmap's SVG, unescaped."""
    import html
    import re
    return [html.unescape(t) for t in re.findall(r'rotate\(-45\)"[^>]*>([^<]*)</text>', svg)]


def is_byte_symbol(c):
    return 0x80 <= ord(c) <= 0x143 or c == "\ufffd"


def check_word_view(page, what, causal):
    """Token matrix, then the word switch: one row per word, rows summing to 1, equal to
    the float64 aggregation of the token matrix."""
    page.js("document.getElementById('words').checked = false;")
    page.recompute(f"{what} tokens")
    tokens = page.js("return window.labResult;")
    page.js("document.getElementById('words').checked = true;")
    page.recompute(f"{what} words")
    words = page.js("return window.labResult;")
    page.js("document.getElementById('words').checked = false;")
    ranges = [tuple(r) for r in words["word_ranges"]]
    assert words["words"] and len(words["matrix"]) == len(ranges), f"{what}: {len(words['matrix'])} rows"
    want = aggregate_words(tokens["matrix"], ranges)
    worst = max(abs(a - b) for r, w in zip(words["matrix"], want) for a, b in zip(r, w))
    assert worst <= 1e-6, f"{what}: word view differs from the float64 aggregation by {worst}"
    for i, r in enumerate(words["matrix"]):
        assert abs(sum(r) - 1) < 1e-6, f"{what}: word row {i} sums to {sum(r)}"
    if causal:
        upper = [words["matrix"][i][j] for i in range(len(ranges)) for j in range(i + 1, len(ranges))]
        assert all(x == 0.0 for x in upper), f"{what}: word upper triangle {upper}"
    print(f"{what}: {len(tokens['matrix'])} tokens -> {len(ranges)} words {words['tokens']}, "
          f"within {worst:.1e} of the float64 aggregation")
    return words


def check_exports(page, ids, downloads):
    """Clicks each figure's "save SVG" and "save PNG" and checks the downloaded files: the
    SVG parses and is the figure shown, the PNG is a PNG of the SVG's size."""
    import xml.etree.ElementTree as ET
    for fig in ids:
        shown = page.js("const s = document.querySelector('#' + arguments[0] + ' svg');"
                        "return s ? [s.getAttribute('width'), s.getAttribute('height')] : null;", fig)
        assert shown, f"export {fig}: nothing drawn"
        width, height = (math.ceil(float(x)) for x in shown)
        for kind in ("svg", "png"):
            name = f"lab-{fig}.{kind}"
            path = os.path.join(downloads, name)
            if os.path.exists(path):
                os.remove(path)
            page.click(f'button.export[data-target="{fig}"][data-kind="{kind}"]')
            deadline = time.time() + 20
            while time.time() < deadline and not os.path.exists(path):
                time.sleep(0.1)
            assert os.path.exists(path), f"export {fig} {kind}: no {name} downloaded ({os.listdir(downloads)})"
            time.sleep(0.2)
            data = open(path, "rb").read()
            if kind == "svg":
                root = ET.fromstring(data)
                assert root.tag.endswith("svg"), f"{name}: root {root.tag}"
                assert int(float(root.get("width"))) == int(float(shown[0])), f"{name}: width"
                assert len(root.findall(".//{http://www.w3.org/2000/svg}rect")) > 1, f"{name}: no cells"
            else:
                assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{name}: not a PNG"
                w, h = struct.unpack(">II", data[16:24])
                assert (w, h) == (width, height), f"{name}: {w}x{h}, the figure is {width}x{height}"
            os.remove(path)
        print(f"export {fig}: valid SVG and {width}x{height} PNG downloaded")


def set_switches(page, causal, scale="sqrt", kq=False):
    page.js("document.getElementById('causal').checked = arguments[0];"
            "document.getElementById('scale').value = arguments[1];"
            "document.getElementById('kq').checked = arguments[2];"
            "document.getElementById('windowed').checked = false;"
            "document.getElementById('words').checked = false;", causal, scale, kq)


def check_real_head(page, what, model, model_causal, cross, downloads=None):
    """The switches, the steps, cross-attention and the cache on a loaded model's real
    layer 0 head 0: each changed matrix equals a float64 softmax of the q and k the page
    exposes (the head's real tensors), recomputed without a new forward pass."""
    page.js("document.getElementById('layer').value = '0';"
            "document.getElementById('head').value = '0';")
    set_switches(page, model_causal)
    page.recompute(f"{what} own switches")
    r = page.js("return window.labResult;")
    if r["backend"] != "webgpu":
        assert "WebGPU" in page.js("return document.getElementById('step').textContent;"), \
            f"{what}: without WebGPU the real-head panels must say why"
        print(f"{what}: no WebGPU: the real-head panels say they need it")
        return
    assert not r["whatif"]["active"], f"{what}: the model's own switches are not a what-if"
    own = r["matrix"]
    cases = [(f"{what} causal {not model_causal}", not model_causal, "sqrt", False),
             (f"{what} scale none", model_causal, "none", False),
             (f"{what} K = Q", model_causal, "sqrt", True)]
    for name, causal, scale, kq in cases:
        set_switches(page, causal, scale, kq)
        page.recompute(name)
        r = page.js("return window.labResult;")
        assert r["pass_reused"], f"{name}: a switch re-ran the forward pass"
        assert r["whatif"]["active"], f"{name}: not marked as a what-if"
        m = check_matrix(page, name, causal)
        if kq:
            assert r["k"] == r["q"], f"{name}: the exposed k is not q"
        assert r["whatif"]["original"] == own, f"{name}: the side-by-side lost the trained head"
        diff = max(abs(a - b - d) for ra, rb, rd in zip(r["whatif"]["changed"], own, r["whatif"]["diff"])
                   for a, b, d in zip(ra, rb, rd))
        assert diff < 1e-6, f"{name}: the difference panel is not changed - original ({diff})"
        soft = max(abs(a - b) for ra, rb in zip(r["steps"]["softmax"], m) for a, b in zip(ra, rb))
        assert soft < 1e-6, f"{name}: the step-through's softmax differs from the heatmap by {soft}"
        print(f"{name}: head recomputed in {r['head_ms']:.0f} ms on the kept pass; "
              f"largest change {r['whatif']['max_change']:.3f}; steps' softmax = heatmap")
        if downloads and kq:
            check_exports(page, ["wi-original", "wi-changed", "wi-diff"], downloads)
    set_switches(page, not model_causal)
    page.js("document.getElementById('propagate').checked = true;")
    page.recompute(f"{what} propagate")
    page.js("document.getElementById('propagate').checked = false;")
    p = page.js("return window.labResult;")["propagate"]
    biggest = max(p["shift_cpu"])
    worst = max(abs(a - b) for a, b in zip(p["shift"], p["shift_cpu"]))
    assert biggest > 1e-3, f"{what}: propagating the changed head moved nothing ({biggest})"
    assert worst <= 1e-3 + 1e-2 * biggest, \
        f"{what}: the GPU's hidden-state shift differs from float64's by {worst} (largest {biggest})"
    if model_causal:
        assert len(p["top_before"]) == 5 and len(p["top_after"]) == 5, p
    # The same change in an independent numpy float64 forward pass of the checkpoint.
    assert reference is not None, f"{what}: propagate's numpy check needs numpy ({REFERENCE_ERROR})"
    ids = page.js("return window.labResult.ids;")
    t0 = time.time()
    want = reference.patched_shift(model, MODEL_FILES[model], ids, 0, 0, not model_causal,
                                   lambda d: 1.0 / math.sqrt(d))
    npy_worst = max(abs(a - b) for a, b in zip(p["shift"], want))
    assert len(want) == len(p["shift"]) and npy_worst <= 1e-3 + 1e-2 * max(want), \
        f"{what}: the GPU's hidden-state shift differs from numpy's by {npy_worst} (largest {max(want)})"
    print(f"{what}: propagated: final hidden states moved up to {biggest:.3f}, GPU within "
          f"{worst:.1e} of the crate's float64 pass with the same head patched and within "
          f"{npy_worst:.1e} of an independent numpy float64 forward pass "
          f"({time.time() - t0:.1f} s), in {p['ms']:.0f} ms")
    set_switches(page, model_causal)
    page.js("document.getElementById('cross').value = arguments[0];", cross)
    page.recompute(f"{what} cross")
    r = page.js("return window.labResult;")
    page.js("document.getElementById('cross').value = '';")
    c = r["cross"]
    badge = float(page.js("return document.getElementById('crossbadge').dataset.diff;"))
    assert badge < 1e-4, f"{what}: cross-attention badge {badge}"
    assert len(c["matrix"]) == len(r["step_tokens"]) and len(c["matrix"][0]) == len(c["tokens"])
    print(f"{what}: cross-attention {len(c['matrix'])}x{len(c['tokens'])} ({cross!r}), badge {badge:.1e}")
    if model_causal:
        cache = r["cache"]["matrix"]
        worst = max(abs(a - b) for ra, rb in zip(cache, r["matrix"]) for a, b in zip(ra, rb))
        assert worst < 1e-4, f"{what}: the cache's rows differ from the causal head by {worst}"
        page.click("#play")
        seen = []
        deadline = time.time() + 60
        while time.time() < deadline:
            n = page.js("const t = document.getElementById('cachekeys'); return t ? Number(t.dataset.rows) : 0;")
            if not seen or seen[-1] != n:
                seen.append(n)
            if n == len(cache) and len(seen) > 1:
                break
            time.sleep(0.05)
        grown = [n for n in seen if n != len(cache) or n == seen[-1]]
        assert grown == list(range(grown[0], len(cache) + 1)), f"{what}: the cache grew {seen}"
        print(f"{what}: the KV cache panel grows one key row per token {grown}; rows within {worst:.1e} of the head")
    else:
        assert "no KV cache" in page.js("return document.getElementById('cache').textContent;")


# The lecture's pairs: word order, and one word's sense in two contexts.
PAIRS = [("Tom ate the dog", "The dog ate Tom"), ("an apple and an orange", "an apple phone")]

LONG_TEXT = " ".join([
    "Attention lets every token look at every other token and take a weighted mean of their values.",
    "The weights come from a softmax over scaled dot products of queries and keys.",
    "A long context makes the matrix of weights grow with the square of its length,",
    "so a tool that wants to show it must pool it into cells or look at a window.",
] * 3)


def check_long(page, what, model_causal, downloads):
    """The long-text panel on the loaded model: the pooled map of layer 0 head 0 equals the
    full attention matrix rebuilt in float64 from the head's q and k (which the page exposes
    on request) and pooled, rows sum to 1, the row entropies match, and a zoomed cell equals
    that region of the full matrix."""
    page.js("document.getElementById('layer').value = '0';"
            "document.getElementById('head').value = '0';"
            "document.getElementById('longtext').value = arguments[0];"
            "document.getElementById('longpool').value = '16';"
            "window.labLongExpose = true;", LONG_TEXT)
    page.js("document.getElementById('status').dataset.status = 'running';")
    page.click("#longrun")
    page.wait_done(f"{what} pooled", timeout=600)
    r = page.js("return window.labLong;")
    n = r["tokens"]
    assert n > 100 and len(r["q"]) == n and len(r["k"]) == n, f"{what}: {n} tokens, q {len(r['q'])}"
    full = softmax_rows(r["q"], r["k"], r["scale"], model_causal)
    re_, ce = r["row_edges"], r["col_edges"]
    want = [[sum(sum(full[i][j] for j in range(ce[c], ce[c + 1])) for i in range(re_[a], re_[a + 1]))
             / (re_[a + 1] - re_[a]) for c in range(len(ce) - 1)] for a in range(len(re_) - 1)]
    worst = max(abs(x - y) for rx, ry in zip(r["map"], want) for x, y in zip(rx, ry))
    assert worst < 1e-5, f"{what}: the pooled map differs from the full matrix pooled by {worst}"
    for i, row in enumerate(r["map"]):
        assert abs(sum(row) - 1) < 1e-4, f"{what}: pooled row {i} sums to {sum(row)}"
    ent = [-sum(w * math.log(w) for w in row if w > 0) for row in full]
    eworst = max(abs(a - b) for a, b in zip(r["entropy"], ent))
    assert eworst < 1e-4, f"{what}: row entropy differs from the full matrix's by {eworst}"
    assert r["map_badge"] < 1e-5 and r["entropy_badge"] < 1e-4, (r["map_badge"], r["entropy_badge"])
    page.js("document.getElementById('status').dataset.status = 'running'; window.labZoom(3, 2);")
    page.wait_done(f"{what} zoom")
    z = page.js("return window.labLong.zoom;")
    (r0, r1), (c0, c1) = z["rows"], z["cols"]
    assert (r0, r1, c0, c1) == (re_[3], re_[4], ce[2], ce[3]), z["cell"]
    zworst = max(abs(z["weights"][i - r0][j - c0] - full[i][j]) for i in range(r0, r1) for j in range(c0, c1))
    assert zworst < 1e-5 and z["badge"] < 1e-5, f"{what}: zoom differs by {zworst} (badge {z['badge']})"
    print(f"{what}: {n} tokens pooled to {r['pool']} within {worst:.1e} of the full matrix pooled, "
          f"entropy within {eworst:.1e}; zoom on cell (3, 2) = rows {r0}..{r1} x keys {c0}..{c1} "
          f"within {zworst:.1e}; device memory for the view {r['device_bytes']} bytes; "
          f"pooled in {r['patterns_ms']:.0f} ms")
    if downloads:
        check_exports(page, ["longmap", "longzoom"], downloads)
    page.js("window.labLongExpose = false;")


def check_pair(page, what, a, b, downloads=None):
    """The two-prompts panel: A and B each equal a float64 softmax of that sentence's own
    exposed q and k (where the page exposes them: the built-in embedding, or a loaded model
    on WebGPU), and the difference panel is exactly A − B over their common positions."""
    page.js("document.getElementById('pairA').value = arguments[0];"
            "document.getElementById('pairB').value = arguments[1];"
            "document.getElementById('status').dataset.status = 'running';"
            "window.labComparePair();", a, b)
    page.wait_done(f"{what} pair", timeout=600)
    p = page.js("return window.labPair;")
    exact, exposed = 0.0, True
    for side, m in (("side_a", p["a"]), ("side_b", p["b"])):
        s_ = p[side]
        assert len(m) == len(s_["tokens"]), f"{what}: {side} has {len(m)} rows for {len(s_['tokens'])} tokens"
        for i, row in enumerate(m):
            assert abs(sum(row) - 1) < 1e-5, f"{what}: {side} row {i} sums to {sum(row)}"
        if s_.get("q"):
            want = softmax_rows(s_["q"], s_["k"], s_["scale"], s_["causal"])
            exact = max(exact, max(abs(x - y) for rx, ry in zip(m, want) for x, y in zip(rx, ry)))
        else:
            exposed = False
    assert exact < 1e-5, f"{what}: a side differs from float64 softmax(q kᵀ) by {exact}"
    n = p["common"]
    assert n == min(len(p["a"]), len(p["b"])) and p["same_length"] == (len(p["a"]) == len(p["b"]))
    worst = max(abs(p["diff"][i][j] - (p["a"][i][j] - p["b"][i][j])) for i in range(n) for j in range(n))
    assert worst < 1e-6, f"{what}: the difference panel is not A − B ({worst})"
    assert p["badge"] < 1e-4, f"{what}: pair badge {p['badge']}"
    how = (f"each within {exact:.1e} of float64 softmax(q kᵀ)" if exposed else
           f"(no q, k without WebGPU) badge {p['badge']:.1e} against the page's float64 pass")
    print(f"{what}: pair {a!r} / {b!r}: {len(p['a'])} and {len(p['b'])} tokens, {how}, diff = A − B over {n} positions (largest {p['max_diff']:.3f})")
    if downloads:
        check_exports(page, ["pair-a", "pair-b", "pair-diff"], downloads)
    return p


def check_head_table(page, what, fixture):
    """The model view's heads-at-a-glance table against the numpy float64 statistics of
    tests/fixtures/models/bert (head_stats.py): entropy, attention to the previous and the
    first token, and the nearest head; then ordered by entropy."""
    want = json.load(open(fixture))
    r = page.js("return window.labResult;")
    got = {(h["layer"], h["head"]): h for h in r["head_stats"]}
    assert len(got) == want["layers"] * want["heads_per_layer"], f"{what}: {len(got)} heads in the table"
    worst = 0.0
    for w in want["heads"]:
        g = got[(w["layer"], w["head"])]
        for key in ("entropy", "previous_token", "first_token"):
            worst = max(worst, abs(g[key] - w[key]))
        if tuple(g["nearest"]) != tuple(w["nearest"]):
            # Only a near tie may pick another head: at the fixture's distance.
            assert abs(g["distance"] - w["distance"]) < 1e-5, f"{what}: nearest of {w['layer'], w['head']}"
        worst = max(worst, abs(g["distance"] - w["distance"]))
    assert worst < 1e-4, f"{what}: head statistics differ from numpy float64 by {worst}"
    rows = page.js("return document.querySelectorAll('#headtable tr[data-layer]').length;")
    assert rows == len(got), f"{what}: the table shows {rows} rows"
    page.js("document.getElementById('order').value = 'entropy';")
    page.recompute(f"{what} heads by entropy")
    r = page.js("return window.labResult;")
    order = [tuple(x) for x in r["order"]]
    ent = [got[o]["entropy"] for o in order]
    assert sorted(order) == sorted(got) and ent == sorted(ent), f"{what}: not ordered by entropy"
    shown = page.js("return [...document.querySelectorAll('#headtable tr[data-layer]')]"
                    ".map(t => [Number(t.dataset.layer), Number(t.dataset.head)]);")
    assert [tuple(x) for x in shown] == order, f"{what}: the table is not in the model view's order"
    assert "by entropy" in page.js("return document.getElementById('grid').innerHTML;")
    page.js("document.getElementById('order').value = 'layer';")
    print(f"{what}: {len(got)} heads' entropy, previous/first-token attention and nearest head "
          f"within {worst:.1e} of numpy float64; ordered by entropy in the grid and the table")


def check_minilm(page, out_dir, downloads):
    ref_dir = os.path.join(HERE, "..", "..", "tests", "fixtures", "models", "bert")
    shape, ref = read_npy_f32(os.path.join(ref_dir, "cat_attention.npy"))
    layers, heads, _, _ = shape
    load_model(page, "minilm", "The cat sat on the mat")
    picks = [(0, 0), (2, 5), (layers - 1, heads - 1)]
    r, m = check_rows(page, "MiniLM", ref, shape, picks, 2e-4)
    shown = float(page.js("return document.getElementById('forwardtime').dataset.ms;"))
    assert shown == r["forward_ms"], (shown, r["forward_ms"])
    tps = float(page.js("return document.getElementById('forwardtime').dataset.tokensPerSecond;"))
    assert abs(tps - len(r["tokens"]) / (r["forward_ms"] / 1000)) < 1e-6 * tps, tps
    print(f"MiniLM: forward pass on {r['backend']} {r['forward_ms']:.0f} ms for "
          f"{len(r['tokens'])} tokens, {tps:.1f} tokens/s (q, k, v kept in {r['inputs_ms']:.0f} ms; "
          f"float64 reference {r['reference_ms']:.0f} ms)")
    if r["backend"] == "cpu":
        # Without WebGPU the page's attention comes from the fast CPU path.
        assert r["forward_ms"] < 1000, f"MiniLM on the CPU path took {r['forward_ms']:.0f} ms"
    assert r["tokens"][0] == "[CLS]" and r["tokens"][-1] == "[SEP]", r["tokens"]
    assert r["tokens"][2] == "cat", r["tokens"]
    page.click('#strip button[data-index="2"]')
    bars = json.loads(page.js("return document.getElementById('bars').dataset.weights;"))
    assert bars == m[2], "MiniLM: the bars of 'cat' are not its row"
    print("MiniLM: clicked 'cat': bars equal row 2")
    check_head_table(page, "MiniLM", os.path.join(ref_dir, "cat_head_stats.json"))
    for a, b in PAIRS:
        check_pair(page, "MiniLM", a, b, downloads if a == PAIRS[0][0] else None)
    page.js("document.getElementById('sentence').value = 'The cat sat on the mat';")
    page.recompute("MiniLM back to the cat")
    page.screenshot(os.path.join(out_dir, "lab-minilm.png"))
    page.js("document.getElementById('sentence').value = arguments[0];", KOREAN)
    page.recompute("MiniLM Korean")
    warm = page.js("return window.labResult;")
    print(f"MiniLM: warm forward pass on {warm['backend']} {warm['forward_ms']:.0f} ms for "
          f"{len(warm['token_labels'])} tokens, "
          f"{len(warm['token_labels']) / (warm['forward_ms'] / 1000):.1f} tokens/s")
    labels = svg_axis_labels(page.js("return document.getElementById('heatmap').innerHTML;"))
    shown = [c for c in "".join(labels) if "\uac00" <= c <= "\ud7a3"]
    assert shown == [c for c in KOREAN if c != " "], f"MiniLM Korean labels {labels}"
    assert not any(is_byte_symbol(c) for c in "".join(labels)), labels
    print(f"MiniLM Korean: the axis reads {' '.join(labels)}")
    words = check_word_view(page, "MiniLM Korean", causal=False)
    assert words["tokens"] == ["[CLS]"] + KOREAN.split(" ") + ["[SEP]"], words["tokens"]
    page.js("document.getElementById('sentence').value = 'The cat sat on the mat';")
    check_real_head(page, "MiniLM", "minilm", False, "The dog ate Tom", downloads)
    if page.js("return window.labResult.backend;") == "webgpu":
        check_long(page, "MiniLM", False, downloads)
    page.screenshot(os.path.join(out_dir, "lab-minilm-whatif.png"))


def check_smollm2(page, out_dir):
    ref_dir = os.path.join(HERE, "..", "..", "tests", "fixtures", "models", "llama")
    shape, ref = read_npy_f32(os.path.join(ref_dir, "attention_i_love_ai.npy"))
    layers, heads, _, _ = shape
    load_model(page, "smollm2", "I love AI !")
    r, m = check_rows(page, "SmolLM2", ref, shape, [(0, 0), (layers - 1, heads - 1)], 2e-4)
    upper = [m[i][j] for i in range(len(m)) for j in range(i + 1, len(m))]
    assert all(x == 0.0 for x in upper), f"SmolLM2: upper triangle not 0: {upper}"
    print("SmolLM2: causal, the upper triangle is exactly 0")
    check_real_head(page, "SmolLM2", "smollm2", True, "The dog ate Tom")
    if page.js("return window.labResult.backend;") == "webgpu":
        check_long(page, "SmolLM2", True, None)
    capital = json.load(open(os.path.join(ref_dir, "next_capital.json")))
    page.js("document.getElementById('sentence').value = 'The capital of France is';")
    page.recompute("SmolLM2 prompt")
    warm = page.js("return window.labResult;")
    print(f"SmolLM2: warm forward pass on {warm['backend']} {warm['forward_ms']:.0f} ms for "
          f"{len(warm['token_labels'])} tokens, "
          f"{len(warm['token_labels']) / (warm['forward_ms'] / 1000):.1f} tokens/s")
    page.js("document.getElementById('status').dataset.status = 'running';")
    t0 = time.time()
    page.click("#generate")
    page.wait_done("SmolLM2 generation", timeout=600)
    seconds = time.time() - t0
    text = page.js("return document.getElementById('genout').textContent;")
    cached = page.js("return [...document.querySelectorAll('#gencache .bar')]"
                     ".map(b => Number(b.dataset.cached));")
    n = len(cached)
    prompt = len(capital["prompt"])
    assert cached == list(range(prompt, prompt + n)), f"cache sizes {cached}"
    want = "The capital of France is" + capital["greedy8_text"]
    assert text.startswith(want[:len(text)]) or text.startswith(want), \
        f"SmolLM2 generated {text!r}; numpy's greedy tokens give {want!r}"
    speed = page.js("return document.getElementById('genspeed').dataset;")
    step_tps, prompt_s = float(speed["tokensPerSecond"]), float(speed["promptSeconds"])
    assert int(speed["promptTokens"]) == prompt and step_tps > 0 and 0 < prompt_s < seconds, speed
    print(f"SmolLM2: {n} tokens in {seconds:.1f} s, one at a time, the KV cache growing "
          f"{cached[0]}..{cached[-1]}; the page reports the prompt ({prompt} tokens) and first "
          f"token in {prompt_s:.2f} s, then {step_tps:.2f} tokens/s; {text!r}")
    page.screenshot(os.path.join(out_dir, "lab-smollm2.png"))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out_dir, exist_ok=True)
    url = web.serve(HERE)
    webgpu = os.environ.get("WEBGPU", "1") != "0"
    args = ["--headless=new", "--no-sandbox", "--window-size=1280,2400",
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run",
            # Nothing but the local server resolves: a request elsewhere fails loudly.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
    if webgpu:
        args.append("--enable-unsafe-webgpu")
    port = web.free_port()
    driver = subprocess.Popen(
        [os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"), f"--port={port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                web.call(base, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        import tempfile
        downloads = tempfile.mkdtemp(prefix="lab-downloads-")
        prefs = {"download.default_directory": downloads, "download.prompt_for_download": False}
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"args": args, "prefs": prefs},
                                                 "goog:loggingPrefs": {"browser": "ALL"}}}}
        session = web.call(base, "POST", "/session", caps)["sessionId"]
        page = Page(base, session)
        page.url = url
        try:
            web.call(base, "POST", page.s + "/url", {"url": url})
            print("first run:", page.wait_done("first run"))
            backend = page.js("return document.body.dataset.backend;")
            want = "webgpu" if webgpu else "cpu"
            assert backend == want, f"backend {backend}, expected {want}"

            page.js("document.getElementById('sentence').value = arguments[0];"
                    "document.getElementById('cross').value = arguments[1];",
                    "the cat ate the fish ; it was delicious", "고양이가 생선을 먹었다")
            print("typed:", page.recompute("typed sentence"))
            matrix = check_matrix(page, "bidirectional", causal=False)

            page.click('#strip button[data-index="4"]')
            bars = json.loads(page.js("return document.getElementById('bars').dataset.weights;"))
            assert bars == matrix[4], "the bars of word 4 are not its row"
            pinned = page.js("return document.querySelector('#strip button.pinned').dataset.index;")
            assert pinned == "4", f"pinned {pinned}"
            print("clicked 'fish': bars equal row 4")

            cross = float(page.js("return document.getElementById('crossbadge').dataset.diff;"))
            cache = float(page.js("return document.getElementById('cachebadge').dataset.diff;"))
            assert cross < 1e-4 and cache < 1e-4, f"cross {cross}, cache {cache}"
            print(f"cross-attention badge {cross:.1e}, KV-cache badge {cache:.1e}")
            check_exports(page, ["heatmap", "grid", "crossmap"], downloads)
            page.screenshot(os.path.join(out_dir, "lab.png"))

            for a, b in PAIRS:
                check_pair(page, "built-in", a, b, downloads if a == PAIRS[0][0] else None)

            page.js("document.getElementById('sentence').value = 'I love AI !';")
            page.click("#causal")
            print("causal:", page.wait_done("causal switch"))
            page.recompute("causal sentence")
            matrix = check_matrix(page, "causal", causal=True)
            upper = [matrix[i][j] for i in range(len(matrix)) for j in range(i + 1, len(matrix))]
            assert all(x == 0.0 for x in upper), f"upper triangle not 0: {upper}"
            svg = page.js("return document.getElementById('heatmap').innerHTML;")
            assert svg.count("−∞</text>") == len(upper), "masked cells are not marked −∞"
            print(f"causal: upper triangle exactly 0, {len(upper)} cells drawn −∞")
            page.screenshot(os.path.join(out_dir, "lab-causal.png"))

            text = "the cat ate the fish; it was delicious"
            page.js("document.getElementById('sentence').value = arguments[0];", text)
            words = check_word_view(page, "built-in", causal=True)
            assert words["tokens"] == text.split(), words["tokens"]
            assert [tuple(r) for r in words["word_ranges"]][4] == (4, 6), "fish; is two tokens"
            page.recompute("built-in, per token again")

            served = json.loads(open(os.path.join(HERE, "models", "index.json")).read()) \
                if os.path.exists(os.path.join(HERE, "models", "index.json")) else []
            names = [m["name"] for m in served]
            if "minilm" in names and os.environ.get("LAB_MODELS", "1") != "0":
                check_minilm(page, out_dir, downloads)
            else:
                print("checked the built-in model (with scripts/fetch-models.sh's MiniLM served, also MiniLM)")
            if "smollm2" in names and os.environ.get("LAB_SMOLLM2") == "1":
                check_smollm2(page, out_dir)

            urls = page.js("return performance.getEntriesByType('resource').map(e => e.name);")
            outside = [u for u in urls if not u.startswith("http://127.0.0.1:")]
            assert not outside, f"requests outside 127.0.0.1: {outside}"
            print(f"{len(urls)} requests, all to 127.0.0.1")
        except (AssertionError, SystemExit):
            print_console(page)
            raise
        finally:
            web.call(base, "DELETE", page.s)
    finally:
        driver.terminate()
        driver.wait()
        if "downloads" in locals():
            import shutil
            shutil.rmtree(downloads, ignore_errors=True)
    print("lab check: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
