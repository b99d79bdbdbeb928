// The token viewer's page script (inlined by analysis/token_view.py). The URL fragment is
// the state: #step=3&update=1&color=clip&filter=clipped,pos&lowp=0.2. Every control writes
// the fragment and every render reads it, so a view can be linked and tested.
"use strict";

const errorsEl = document.getElementById("errors");
function report(text) {
  errorsEl.hidden = false;
  errorsEl.textContent += text + "\n";
}
window.addEventListener("error", (e) => report(`script error: ${e.message} (line ${e.lineno})`));
window.addEventListener("unhandledrejection", (e) =>
  report(`script error: ${(e.reason && e.reason.stack) || e.reason}`));

const HEAD = JSON.parse(document.getElementById("view-head").textContent);
const VS = HEAD.runs.length === 2;
const TYPES = { f32: Float32Array, i32: Int32Array, i16: Int16Array, u8: Uint8Array,
                u16: Uint16Array, u32: Uint32Array };
const NO_GRAD = HEAD.clip_states.map((s) => HEAD.no_gradient.includes(s));
const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
  .replace(/"/g, "&quot;");
const TEXT = HEAD.vocab.map(esc);
const LABELS = HEAD.runs.map((r, i) =>
  VS && HEAD.runs[0].label === HEAD.runs[1].label ? `${r.label} [${"AB"[i]}]` : r.label);
let R = []; // per run: {info, c: columns, segs: Map "step:update" -> [first, end) segment}
const STATES_PRESENT = new Set(); // clip-state codes in the page's rows: the legend lists these

async function inflate(b64) {
  if (typeof DecompressionStream === "undefined") {
    throw new Error("this browser has no DecompressionStream (Chrome 80+, Firefox 113+, Safari 16.4+)");
  }
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).arrayBuffer();
}

function loadRuns(buf) {
  R = HEAD.runs.map((info) => {
    const c = {};
    for (const [name, [type, offset, n]] of Object.entries(info.cols)) {
      c[name] = new TYPES[type](buf, offset, n);
    }
    const segs = new Map();
    for (let s = 0; s < c.seg_step.length; s++) {
      const key = `${c.seg_step[s]}:${c.seg_update[s]}`;
      const span = segs.get(key);
      if (span) span[1] = s + 1; else segs.set(key, [s, s + 1]);
    }
    for (const code of c.state) STATES_PRESENT.add(code);
    const records = new Map(info.updates.map((u) => [`${u.step}:${u.update}`, u]));
    return { info, c, segs, records };
  });
}

function updatesOf(step) {
  const found = new Set();
  for (const run of R) {
    for (const key of run.segs.keys()) {
      const [s, u] = key.split(":").map(Number);
      if (s === step) found.add(u);
    }
  }
  return [...found].sort((a, b) => a - b);
}

// -- a token's numbers -----------------------------------------------------------------------
const grad = (r, i) => !NO_GRAD[R[r].c.state[i]];
const partner = (r, i) => (VS ? R[r].c.pair[i] : -1);
const fmt = (x, d = 3) => (Number.isFinite(x) ? Number(x.toPrecision(d)).toString() : "–");
const fixed = (x, d = 2) => (x === null || x === undefined || !Number.isFinite(x) ? "–" : x.toFixed(d));
const signed = (x) => (x > 0 ? "+" : "") + fmt(x);

// -- colourings: a palette and which entry a token takes (-1: none) ----------------------------
function bins(edges, value) {
  let k = 0;
  while (k < edges.length && value >= edges[k]) k++;
  return k;
}
const CLIP_COLORS = { clip_low: "#6baed6", clip_high: "#fd8d3c", dual: "#b39ddb", masked: "#bdbdbd",
                      trunc_low: "#c6dbef", trunc_high: "#fdd0a2", kl_penalty: "#c7e9c0",
                      gated: "#fee391", preserved_low: "#9ecae1", preserved_high: "#fdae6b",
                      dual_capped: "#dadaeb" };
const MODES = {
  clip: {
    label: "clip state",
    palette: HEAD.clip_states.map((s) => ({
      label: `${s}${NO_GRAD[HEAD.clip_states.indexOf(s)] ? " (no gradient)" : " (gradient kept)"}`,
      bg: CLIP_COLORS[s] || null })),
    shown: (k) => STATES_PRESENT.has(k),
    classify: (r, i) => (R[r].c.state[i] === 0 ? -1 : R[r].c.state[i]),
    note: "no colour: state none (the token keeps its gradient)",
  },
  ratio: {
    label: "IS ratio",
    edges: [0.5, 0.8, 0.95, 1.05, 1.25, 2],
    palette: [["< 0.5", "#2166ac", "#fff"], ["0.5–0.8", "#67a9cf"], ["0.8–0.95", "#d1e5f0"],
              ["0.95–1.05", null], ["1.05–1.25", "#fddbc7"], ["1.25–2", "#ef8a62"],
              ["≥ 2", "#b2182b", "#fff"]].map(([label, bg, fg]) => ({ label, bg, fg })),
    classify(r, i) { const k = bins(this.edges, R[r].c.ratio[i]); return k === 3 ? -1 : k; },
    note: "ratio = π_θ / π_old, the one the method clips; no colour: 0.95–1.05",
  },
  sign: {
    label: "advantage sign",
    palette: [{ label: "A > 0", bg: HEAD.sign_colors["A>0"] + "66" },
              { label: "A < 0", bg: HEAD.sign_colors["A<0"] + "66" }],
    classify: (r, i) => (R[r].c.adv[i] > 0 ? 0 : R[r].c.adv[i] < 0 ? 1 : -1),
    note: "no colour: A = 0",
  },
  entropy: {
    label: "entropy",
    edges: [0.05, 0.2, 0.5, 1, 2],
    palette: [["< 0.05", null], ["0.05–0.2", "#edf8e9"], ["0.2–0.5", "#bae4b3"],
              ["0.5–1", "#74c476"], ["1–2", "#31a354", "#fff"], ["≥ 2", "#006d2c", "#fff"]]
      .map(([label, bg, fg]) => ({ label, bg, fg })),
    classify(r, i) { const k = bins(this.edges, R[r].c.ent[i]); return k === 0 ? -1 : k; },
    note: "entropy of the behaviour policy's next-token distribution, nats",
  },
  prob: {
    label: "behaviour probability",
    edges: [0.05, 0.2, 0.5, 0.8, 0.95],
    palette: [["< 0.05", "#a50f15", "#fff"], ["0.05–0.2", "#de2d26", "#fff"], ["0.2–0.5", "#fb6a4a"],
              ["0.5–0.8", "#fcae91"], ["0.8–0.95", "#fee5d9"], ["≥ 0.95", null]]
      .map(([label, bg, fg]) => ({ label, bg, fg })),
    classify(r, i) { const k = bins(this.edges, Math.exp(R[r].c.lpb[i])); return k === 5 ? -1 : k; },
    note: "exp(logp_behavior): the probability of the policy that sampled the token",
  },
  lag: {
    label: "lag",
    edges: [1, 2, 4, 8, 16, 32, 64],
    palette: [["0", null], ["1", "#eff3ff"], ["2–3", "#c6dbef"], ["4–7", "#9ecae1"], ["8–15", "#6baed6"],
              ["16–31", "#3182bd", "#fff"], ["32–63", "#08519c", "#fff"], ["≥ 64", "#08306b", "#fff"]]
      .map(([label, bg, fg]) => ({ label, bg, fg })),
    classify(r, i) {
      const lag = R[r].c.lag;
      if (!lag || lag[i] < 0) return -1;
      const k = bins(this.edges, lag[i]);
      return k === 0 ? -1 : k;
    },
    note: "optimizer updates between the weights that sampled the token and this update",
  },
  mismatch: {
    label: "mismatch (sampler vs trainer)",
    edges: [-0.1, -0.01, 0.01, 0.1],
    palette: [["π_old / μ < 0.90", "#2166ac", "#fff"], ["0.90–0.99", "#d1e5f0"], ["0.99–1.01", null],
              ["1.01–1.11", "#fddbc7"], ["≥ 1.11", "#b2182b", "#fff"],
              ["rejected by the correction", "#252525", "#fff"]]
      .map(([label, bg, fg]) => ({ label, bg, fg })),
    classify(r, i) {
      const c = R[r].c;
      if (!c.lps) return -1;
      if (c.rsk && !c.rsk[i]) return 5;
      const k = bins(this.edges, c.lpb[i] - c.lps[i]);
      return k === 2 ? -1 : k;
    },
    note: "log(π_old / μ): the trainer's behaviour log-prob against the sampler's own (rollout.precision, kernels); the token's IS weight is in its details",
  },
};
if (VS) {
  MODES.compare = {
    label: "compare runs",
    palette: [{ label: "kept here, clipped in the other run", bg: "#1a9850", fg: "#fff" },
              { label: "clipped here, kept in the other run", bg: "#d73027", fg: "#fff" },
              { label: "clipped in both", bg: "#91bfdb" }],
    classify(r, i) {
      const j = partner(r, i);
      if (j < 0) return -1;
      const here = grad(r, i), there = grad(1 - r, j);
      return here && !there ? 0 : !here && there ? 1 : !here && !there ? 2 : -1;
    },
    note: "no colour: kept in both, or no partner (dotted underline)",
  };
}

// -- filters (AND-ed); in a comparison they read the first run's token, and its partner in
// the other run is shown or hidden with it -----------------------------------------------------
const FILTERS = [
  { key: "clipped", label: "clipped (no gradient)" },
  { key: "pos", label: "A > 0" },
  { key: "neg", label: "A < 0" },
  { key: "entinc", label: "entropy-increasing (A > 0, low p)", dynamic: (st) => `entropy-increasing (A > 0, p < ${st.lowp})` },
];
if (VS) {
  FILTERS.push({ key: "keptclip", label: `kept by ${LABELS[0]}, clipped by ${LABELS[1]}` },
               { key: "clipkept", label: `clipped by ${LABELS[0]}, kept by ${LABELS[1]}` },
               { key: "differs", label: "gradient differs" });
}
const VS_TERMS = new Set(["keptclip", "clipkept", "differs"]);

function term(t, r, i, st) {
  const c = R[r].c;
  switch (t) {
    case "clipped": return !grad(r, i);
    case "pos": return c.adv[i] > 0;
    case "neg": return c.adv[i] < 0;
    case "entinc": return c.adv[i] > 0 && Math.exp(c.lp[i]) < st.lowp;
    default: {
      const j = partner(r, i);
      if (r !== 0 || j < 0) return false;
      if (t === "keptclip") return grad(0, i) && !grad(1, j);
      if (t === "clipkept") return !grad(0, i) && grad(1, j);
      return grad(0, i) !== grad(1, j);
    }
  }
}

function passes(r, i, st) {
  if (!st.filter.length) return true;
  if (r === 1) {
    const j = partner(1, i);
    if (j >= 0) return passes(0, j, st);
  }
  return st.filter.every((t) => term(t, r, i, st));
}

// -- state in the fragment ----------------------------------------------------------------------
function readState() {
  const q = new URLSearchParams(location.hash.replace(/^#/, ""));
  const notes = [];
  let step = HEAD.steps[0];
  if (q.has("step")) {
    const s = Number(q.get("step"));
    if (HEAD.steps.includes(s)) step = s;
    else notes.push(`step ${esc(q.get("step"))} is not in this page (it holds steps ${HEAD.steps.join(", ")}); showing step ${step}`);
  }
  const ups = updatesOf(step);
  let update = ups[0];
  if (q.has("update")) {
    const u = Number(q.get("update"));
    if (ups.includes(u)) update = u;
    else notes.push(`step ${step} has no update ${esc(q.get("update"))} in the token rows; showing update ${update}`);
  }
  let color = VS ? "compare" : "clip";
  if (q.has("color")) {
    if (q.get("color") in MODES) color = q.get("color");
    else notes.push(`unknown colouring ${esc(q.get("color"))}; showing ${color}`);
  }
  const filter = [];
  for (const t of (q.get("filter") || "").split(",").filter(Boolean)) {
    if (FILTERS.some((f) => f.key === t)) filter.push(t);
    else notes.push(`unknown filter ${esc(t)}${VS_TERMS.has(t) ? " (it needs --vs)" : ""}; left out`);
  }
  let lowp = HEAD.lowp;
  if (q.has("lowp")) {
    const p = Number(q.get("lowp"));
    if (p > 0 && p < 1) lowp = p;
    else notes.push(`lowp ${esc(q.get("lowp"))} is not in (0, 1); using ${lowp}`);
  }
  const token = q.get("token") || "";  // RESPONSE:POSITION, selected and scrolled to
  return { step, update, color, filter, lowp, token, notes };
}

function hashOf(st) {
  let h = `step=${st.step}&update=${st.update}&color=${st.color}`;
  if (st.filter.length) h += `&filter=${st.filter.join(",")}`;
  if (st.lowp !== HEAD.lowp) h += `&lowp=${st.lowp}`;
  if (st.token) h += `&token=${st.token}`;
  return "#" + h;
}

// -- controls -----------------------------------------------------------------------------------
function setupControls() {
  const stepSel = document.getElementById("c-step");
  stepSel.innerHTML = HEAD.steps.map((s) => `<option value="${s}">${s}</option>`).join("");
  document.getElementById("c-color").innerHTML = Object.entries(MODES)
    .map(([k, m]) => `<option value="${k}">${esc(m.label)}</option>`).join("");
  document.getElementById("c-filter").innerHTML = "show only: " + FILTERS.map((f) =>
    `<label><input type="checkbox" value="${f.key}"> <span id="f-${f.key}">${esc(f.label)}</span></label>`).join(" ");
  const go = (change) => { const st = readState(); st.token = ""; change(st); location.hash = hashOf(st); };
  stepSel.onchange = () => go((st) => { st.step = Number(stepSel.value); st.update = updatesOf(st.step)[0]; });
  const upSel = document.getElementById("c-update");
  upSel.onchange = () => go((st) => { st.update = Number(upSel.value); });
  const colSel = document.getElementById("c-color");
  colSel.onchange = () => go((st) => { st.color = colSel.value; });
  for (const box of document.querySelectorAll("#c-filter input")) {
    box.onchange = () => go((st) => {
      st.filter = [...document.querySelectorAll("#c-filter input:checked")].map((b) => b.value);
    });
  }
  const lowp = document.getElementById("c-lowp");
  lowp.onchange = () => go((st) => { const p = Number(lowp.value); if (p > 0 && p < 1) st.lowp = p; });
}

function syncControls(st) {
  document.getElementById("c-step").value = String(st.step);
  document.getElementById("c-update").innerHTML = updatesOf(st.step)
    .map((u) => `<option value="${u}">${u}</option>`).join("");
  document.getElementById("c-update").value = String(st.update);
  document.getElementById("c-color").value = st.color;
  for (const box of document.querySelectorAll("#c-filter input")) box.checked = st.filter.includes(box.value);
  document.getElementById("c-lowp").value = String(st.lowp);
  for (const f of FILTERS) if (f.dynamic) document.getElementById(`f-${f.key}`).textContent = f.dynamic(st);
}

// -- the page's parts -----------------------------------------------------------------------------
function renderRuns() {
  const parts = HEAD.runs.map((info, r) => {
    const s = info.sample;
    const kept = s
      ? ` · <b>a sample of ${Math.round(s.response_fraction * 100)}% of responses</b> (${s.token_rows_kept.toLocaleString("en")} of ${s.token_rows_source.toLocaleString("en")} token rows, exported): every count on this page is of the sample`
      : " · every token row of the run";
    const side = VS ? ` (${r === 0 ? "left" : "right"})` : "";
    return `<p><b>${esc(LABELS[r])}</b>${side} · ${esc(info.dir)} · staleness ${info.staleness}${kept}</p>`;
  });
  document.getElementById("runs").innerHTML = parts.join("");
}

function renderNotes(st) {
  const warnings = st.notes.map((n) => `<p class="warn">Fragment: ${n}.</p>`);
  if (HEAD.steps_note) warnings.push(`<p class="warn">This page holds ${esc(HEAD.steps_note)}.</p>`);
  const about = [`<p><b>Entropy-increasing</b> tokens: A &gt; 0 and p &lt; <b>${st.lowp}</b>, p = the token's probability under π_θ before the update (exp(logp); the "low p, A&gt;0" kind of analysis/figures/tokens.py, whose split is ${HEAD.lowp_default}; <i>lowp=</i> in the fragment or the box above changes it). <b>Clipped</b>: a state without gradient (${HEAD.no_gradient.join(", ")}). Tokens decoded with the tokenizer in ${esc(HEAD.tokenizer)}.</p>`];
  let summary = `About this page: entropy-increasing means A &gt; 0 and p &lt; ${st.lowp}`;
  if (VS) {
    const p = HEAD.pairing;
    const checked = p.initial_checked
      ? `Where both runs sampled with the initial weights (step ${p.initial_steps.join(", ")}) a pair is the same sample (${p.initial_checked.toLocaleString("en")} such positions checked: same tokens)`
      : "No position sampled by the initial weights is in both runs' token rows, so the pairing rests on the configs (same seed, task, model, warm start, sampler)";
    about.push(`<p><b>Pairing</b> (${p.paired.toLocaleString("en")} paired tokens in this page): same step, update, response and position, and the same tokens from the response's start up to this one. ${checked}; at later steps the two policies differ, so a pair is the same text in the same context sampled by different weights, and its probabilities and advantage are each run's own (the advantage depends on how the response ends and on its group). Filters read the left run's token; its partner is shown or hidden with it.</p>`);
    summary += `; ${p.paired.toLocaleString("en")} tokens paired across the runs (same sample only at step ${p.initial_steps.join(", ") || "–"}, later the same text sampled by different weights)`;
  }
  const open = document.getElementById("about") && document.getElementById("about").open;
  document.getElementById("notes").innerHTML = warnings.join("")
    + `<details id="about"${open ? " open" : ""}><summary>${summary}</summary>${about.join("")}</details>`;
}

function renderLegend(st) {
  const mode = MODES[st.color];
  document.getElementById("palette").textContent = mode.palette.map((p, k) =>
    p.bg ? `#tokens .k${k}{background:${p.bg};${p.fg ? `color:${p.fg};` : ""}}` : "").join("\n");
  const items = mode.palette.map((p, k) => (p.bg && (!mode.shown || mode.shown(k))
    ? `<span><span class="sw" style="background:${p.bg};${p.fg ? `color:${p.fg}` : ""}">ab</span>${esc(p.label)}</span>`
    : "")).filter(Boolean);
  let extra = `<span><span class="sw nl t" style="font-style:italic;color:#8a8a8a">ab</span>not in the loss</span>`;
  if (VS) {
    extra += `<span><span class="sw t flip">ab</span>kept in one run, clipped in the other</span>`
      + `<span><span class="sw t np">ab</span>no partner in the other run</span>`;
  }
  if (st.filter.length) {
    extra += `<span><span class="sw t hit">ab</span>matches the filter</span><span><span class="sw t out">ab</span>filtered out</span>`;
  }
  if (mode === MODES.lag && !R.every((run) => run.c.lag)) {
    extra += `<span class="small">(lag not logged in ${R.filter((run) => !run.c.lag).map((run) => esc(run.info.label)).join(", ")})</span>`;
  }
  document.getElementById("legend").innerHTML = `<b>${esc(mode.label)}:</b>${items.join("")}${extra}<span class="small">${esc(mode.note)}</span>`;
}

function countsTable(r, st) {
  const run = R[r], c = run.c;
  const span = run.segs.get(`${st.step}:${st.update}`);
  const n = HEAD.clip_states.map(() => ({ pos: 0, neg: 0, zero: 0 }));
  if (span) {
    const first = c.seg_start[span[0]], end = c.seg_start[span[1] - 1] + c.seg_count[span[1] - 1];
    for (let i = first; i < end; i++) {
      n[c.state[i]][c.adv[i] > 0 ? "pos" : c.adv[i] < 0 ? "neg" : "zero"]++;
    }
  }
  const rows = HEAD.clip_states.map((s, k) => {
    const row = n[k], all = row.pos + row.neg + row.zero;
    if (k !== 0 && all === 0) return "";
    const cell = (sign) => `<td data-run="${r}" data-state="${s}" data-sign="${sign}">${row[sign]}</td>`;
    return `<tr><td>${s}${NO_GRAD[k] ? " <small>(no grad)</small>" : ""}</td>${cell("pos")}${cell("neg")}${cell("zero")}<td>${all}</td></tr>`;
  });
  return `<table class="counts"><tr><th>clip state</th><th>A&gt;0</th><th>A&lt;0</th><th>A=0</th><th>all</th></tr>${rows.join("")}</table>`;
}

function boundsLine(r, st) {
  const info = R[r].info, rec = R[r].records.get(`${st.step}:${st.update}`);
  if (!rec) return `<p class="small">no update record in metrics.jsonl for this update</p>`;
  const bounds = `[${fixed(rec.c_low)}, ${fixed(rec.c_high)}]`;
  let text;
  if (info.adaptive) {
    const target = info.target_name ? ` (target ${esc(info.target_name)} ${info.target})` : "";
    const keys = info.decision_keys;
    const moved = rec.moved === null ? "" : `; bounds moved ${rec.moved} step${rec.moved === 1 ? "" : "s"} from the start`;
    const reached = rec.reached === null ? "" : rec.reached ? ", target reached" : ", <b>target not reached</b>";
    const undef = rec.undefined ? ", undefined (nothing to decide on)" : "";
    text = `<b>bounds ${bounds}</b> chosen per update; ${esc(keys.measure_at_start || "measure")} at the start bounds ${fixed(rec.measure_at_start, 3)} → ${esc(keys.measure || "measure")} at the chosen bounds ${fixed(rec.measure, 3)}${target}${moved}${reached}${undef}`;
  } else {
    text = rec.c_low === null ? "no ratio bounds (the method clips otherwise)" : `fixed bounds ${bounds}`;
  }
  const pct = (x) => (x === null ? "–" : `${(100 * x).toFixed(2)}%`);
  const whole = `whole update (metrics.jsonl): ${rec.tokens_in_loss ?? "–"} tokens in the loss, ${pct(rec.clip_frac)} without gradient (A&gt;0 ${pct(rec.clip_frac_pos)}, A&lt;0 ${pct(rec.clip_frac_neg)})${rec.skipped ? `; <b>skipped</b> (${esc(rec.skip_reason)})` : ""}`;
  return `<p>${text}</p><p class="small">${whole}</p>`;
}

function renderHeads(st) {
  document.getElementById("heads").innerHTML = R.map((run, r) =>
    `<div class="card" data-run="${r}"><h3>${esc(LABELS[r])}: step ${st.step}, update ${st.update}</h3><div class="card-body"><div>${boundsLine(r, st)}</div>${countsTable(r, st)}</div></div>`).join("");
}

function renderIndex(st) {
  // Per (step, update): the tokens the filter keeps, and in a comparison how the runs differ.
  const keys = [];
  for (const s of HEAD.steps) for (const u of updatesOf(s)) keys.push([s, u]);
  const rows = [];
  for (const [s, u] of keys) {
    const here = { s, u, match: [0, 0], paired: 0, keptclip: 0, clipkept: 0 };
    R.forEach((run, r) => {
      const span = run.segs.get(`${s}:${u}`);
      if (!span) return;
      const c = run.c;
      const first = c.seg_start[span[0]], end = c.seg_start[span[1] - 1] + c.seg_count[span[1] - 1];
      for (let i = first; i < end; i++) {
        if (st.filter.length ? passes(r, i, st) : !grad(r, i)) here.match[r]++;
        if (VS && r === 0 && c.pair[i] >= 0) {
          here.paired++;
          if (term("keptclip", 0, i, st)) here.keptclip++;
          if (term("clipkept", 0, i, st)) here.clipkept++;
        }
      }
    });
    const differs = here.keptclip + here.clipkept > 0;
    if (here.match[0] + here.match[1] > 0 || (!st.filter.length && differs)) rows.push(here);
  }
  const what = st.filter.length ? "matching the filter" : "clipped (no gradient)";
  document.getElementById("index-title").textContent =
    `Where to look: ${rows.length} of ${keys.length} updates in this page hold tokens ${what}${VS && !st.filter.length ? " or paired tokens whose gradient differs" : ""} (click to go)`;
  const short = st.filter.length ? "matches" : "clipped";
  const head = `<tr><th>step · update</th>${R.map((run, r) => `<th>${esc(LABELS[r])}: ${short}</th>`).join("")}${VS ? `<th>paired</th><th>${esc(LABELS[0])} kept, ${esc(LABELS[1])} clipped</th><th>${esc(LABELS[0])} clipped, ${esc(LABELS[1])} kept</th>` : ""}</tr>`;
  const body = rows.map((x) => {
    const link = hashOf({ ...st, step: x.s, update: x.u, token: "" });
    const here = x.s === st.step && x.u === st.update ? ' class="here"' : "";
    return `<tr${here}><td><a href="${link}">step ${x.s} · update ${x.u}</a></td>${R.map((run, r) => `<td>${x.match[r]}</td>`).join("")}${VS ? `<td>${x.paired}</td><td>${x.keptclip}</td><td>${x.clipkept}</td>` : ""}</tr>`;
  });
  document.getElementById("index-body").innerHTML = `<table>${head}${body.join("")}</table>`;
}

function responseHeader(r, seg) {
  const c = R[r].c, first = c.seg_start[seg];
  const adv = c.adv[first];
  return `<div class="rh"><b>response ${c.seg_rid[seg]}</b> · reward ${fmt(c.seg_reward[seg])} · A ${signed(adv)} · ${c.seg_count[seg]} tokens${VS ? ` · ${esc(LABELS[r])}` : ""}</div>`;
}

function tokensHTML(r, seg, st, mode) {
  const c = R[r].c, rid = c.seg_rid[seg];
  const first = c.seg_start[seg], end = first + c.seg_count[seg];
  let html = "", any = !st.filter.length;
  for (let i = first; i < end; i++) {
    let cls = "t";
    const k = mode.classify(r, i);
    if (k >= 0 && mode.palette[k].bg) cls += " k" + k;
    if (!c.loss[i]) cls += " nl";
    if (VS) {
      const j = partner(r, i);
      if (j < 0) cls += " np";
      else if (grad(r, i) !== grad(1 - r, j)) cls += " flip";
    }
    if (st.filter.length) {
      if (passes(r, i, st)) {
        any = true;
        cls += " hit";
      } else cls += " out";
    }
    html += `<span class="${cls}" tabindex="0" data-run="${r}" data-i="${i}" data-r="${rid}" data-p="${c.pos[i]}" data-t="${HEAD.vocab_ids[c.tok[i]]}">${TEXT[c.tok[i]]}</span>`;
  }
  return [`<div class="toks">${html}</div>`, any];
}

function renderTokens(st) {
  const mode = MODES[st.color];
  // responses of this update in every run, by (group, response)
  const byResponse = new Map();
  R.forEach((run, r) => {
    const span = run.segs.get(`${st.step}:${st.update}`);
    if (!span) return;
    for (let s = span[0]; s < span[1]; s++) {
      const rid = run.c.seg_rid[s];
      if (!byResponse.has(rid)) byResponse.set(rid, { gid: run.c.seg_gid[s], rid, seg: [-1, -1] });
      byResponse.get(rid).seg[r] = s;
    }
  });
  const responses = [...byResponse.values()].sort((a, b) => a.gid - b.gid || a.rid - b.rid);
  let html = "", shown = 0;
  const groups = new Map();
  for (const resp of responses) {
    if (!groups.has(resp.gid)) groups.set(resp.gid, { html: "", n: 0, any: false });
    const g = groups.get(resp.gid);
    const sides = R.map((run, r) => {
      const seg = resp.seg[r];
      if (seg < 0) return [`<div class="side"><div class="missing">${esc(LABELS[r])}: response ${resp.rid} is not in this run's token rows at this update</div></div>`, false];
      const [toks, any] = tokensHTML(r, seg, st, mode);
      return [`<div class="side">${responseHeader(r, seg)}${toks}</div>`, any];
    });
    const any = sides.some(([, a]) => a);
    if (any) shown++;
    g.n++;
    g.any ||= any;
    g.html += `<div class="resp${VS ? " pair" : ""}${any ? "" : " none"}" data-rid="${resp.rid}">${sides.map(([h]) => h).join("")}</div>`;
  }
  for (const [gid, g] of groups) {
    html += `<section class="group${g.any ? "" : " none"}"><h3>prompt group ${gid} <small>(${g.n} response${g.n === 1 ? "" : "s"} at this update)</small></h3>${g.html}</section>`;
  }
  const tokensEl = document.getElementById("tokens");
  const what = st.filter.length
    ? `<p class="small">Filter: ${st.filter.map((t) => { const f = FILTERS.find((x) => x.key === t); return esc(f.dynamic ? f.dynamic(st) : f.label); }).join(" and ")}; ${shown} of ${responses.length} responses hold a matching token (the others are hidden; in those shown, tokens that do not match are faded).</p>`
    : `<p class="small">${responses.length} responses trained at step ${st.step}, update ${st.update}.</p>`;
  tokensEl.innerHTML = what + (html || `<p class="missing">No token rows at step ${st.step}, update ${st.update}.</p>`);
}

// -- details of one token: a strip at the bottom, one row per run --------------------------------
const INFO_COLUMNS = ["run", "token", "response · position", "behaviour p", "p under π_θ (before the update)",
                      "ratio (the clipped one)", "advantage", "entropy", "clip state", "policy version / lag",
                      "update's c_low / c_high", "sampler p · IS weight (correction)"];

function tokenCells(r, i) {
  const c = R[r].c;
  return [
    esc(LABELS[r]),
    `<span class="tok">${TEXT[c.tok[i]]}</span> id ${HEAD.vocab_ids[c.tok[i]]}`,
    `${c.seg_rid[segOf(r, i)]} · ${c.pos[i]}`,
    fmt(Math.exp(c.lpb[i])),
    fmt(Math.exp(c.lp[i])),
    fmt(c.ratio[i], 4),
    signed(c.adv[i]),
    fmt(c.ent[i]),
    `${HEAD.clip_states[c.state[i]]} (${grad(r, i) ? "gradient kept" : "<b>no gradient</b>"})${c.loss[i] ? "" : ", not in the loss"}`,
    c.pv ? `${c.pv[i]} / ${c.lag[i]}` : "not logged",
    `${fixed(c.clo[i])} / ${fixed(c.chi[i])}`,
    c.lps ? `${fmt(Math.exp(c.lps[i]))} · ${c.isw && Number.isFinite(c.isw[i]) ? fmt(c.isw[i], 4) : "none"}${c.rsk && !c.rsk[i] ? ", <b>rejected</b>" : ""}` : "not logged",
  ];
}

function segOf(r, i) {
  const starts = R[r].c.seg_start;
  let lo = 0, hi = starts.length - 1;
  while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (starts[mid] <= i) lo = mid; else hi = mid - 1; }
  return lo;
}

// Why a pair keeps its gradient in one run only: the advantages' signs, the bounds, or the
// ratios. Read for the ratio clip (states none, clip_low, clip_high) with both runs' bounds.
function whyTheyDiffer(r, i, j) {
  const a = R[r].c, b = R[1 - r].c;
  if (Math.sign(a.adv[i]) !== Math.sign(b.adv[j])) {
    return "<b>the advantages differ in sign</b> (the responses end differently, or their groups do)";
  }
  const ratioClip = (c, k) => c.state[k] <= 2 && Number.isFinite(c.clo[k]) && Number.isFinite(c.chi[k]);
  if (!ratioClip(a, i) || !ratioClip(b, j)) return "the methods clip by other rules than the ratio bounds";
  const clips = (ratio, adv, lo, hi) => (adv > 0 && ratio > hi) || (adv < 0 && ratio < lo);
  const [kept, cut] = grad(r, i) ? [[r, a, i], [1 - r, b, j]] : [[1 - r, b, j], [r, a, i]];
  const [kr, kc, ki] = kept, [cr, cc, ci] = cut;
  if (clips(kc.ratio[ki], kc.adv[ki], cc.clo[ci], cc.chi[ci])) {
    return `<b>the bounds decide</b>: at ${esc(LABELS[kr])}'s ratio ${fmt(kc.ratio[ki], 4)}, ${esc(LABELS[cr])}'s bounds [${fixed(cc.clo[ci])}, ${fixed(cc.chi[ci])}] would clip it too`;
  }
  return `<b>the ratios decide</b> (${fmt(kc.ratio[ki], 4)} vs ${fmt(cc.ratio[ci], 4)}): ${esc(LABELS[cr])}'s bounds would keep ${esc(LABELS[kr])}'s ratio; the two policies moved differently since sampling`;
}

let selected = [];
function showInfo(span) {
  for (const old of selected) old.classList.remove("sel");
  const r = Number(span.dataset.run), i = Number(span.dataset.i);
  const j = partner(r, i);
  const rows = [[r, i]];
  selected = [span];
  if (VS && j >= 0) {
    rows.push([1 - r, j]);
    const other = document.querySelector(`#tokens span.t[data-run="${1 - r}"][data-i="${j}"]`);
    if (other) selected.push(other);
  }
  rows.sort((a, b) => a[0] - b[0]);
  for (const el of selected) el.classList.add("sel");
  const head = `<tr>${INFO_COLUMNS.map((h) => `<th>${h}</th>`).join("")}</tr>`;
  const body = rows.map(([rr, ii]) => `<tr>${tokenCells(rr, ii).map((v) => `<td>${v}</td>`).join("")}</tr>`).join("");
  let pair = "";
  if (VS) {
    pair = j < 0 ? "no partner in the other run"
      : R[r].c.exact[i] ? "paired: the same sample (both runs sampled it with the initial weights)"
        : "paired: the same text in the same context, sampled by different weights";
    if (j >= 0 && grad(r, i) !== grad(1 - r, j)) pair += "; " + whyTheyDiffer(r, i, j);
    pair = `<div class="small">${pair}</div>`;
  }
  document.getElementById("info").innerHTML = `<table>${head}${body}</table>${pair}`;
}

function render() {
  const st = readState();
  syncControls(st);
  renderNotes(st);
  renderLegend(st);
  renderHeads(st);
  renderIndex(st);
  renderTokens(st);
  focusToken(st);
  document.body.dataset.state = hashOf(st).slice(1);
}

function focusToken(st) {
  const [rid, pos] = st.token.split(":");
  if (rid === undefined || pos === undefined) return;
  const span = document.querySelector(`#tokens span.t[data-r="${Number(rid)}"][data-p="${Number(pos)}"]`);
  if (!span) {
    st.notes.push(`no token at response ${esc(rid)}, position ${esc(pos)} in this update`);
    renderNotes(st);
    return;
  }
  showInfo(span);
  const box = span.getBoundingClientRect();
  const strip = document.getElementById("info").getBoundingClientRect().top;
  if (box.top < 0 || box.bottom > strip) span.scrollIntoView({ block: "center" });
}

async function main() {
  const buf = await inflate(document.getElementById("view-data").textContent.trim());
  loadRuns(buf);
  renderRuns();
  setupControls();
  const tokens = document.getElementById("tokens");
  const pick = (e) => { const span = e.target.closest && e.target.closest("span.t[data-i]"); if (span) showInfo(span); };
  tokens.addEventListener("mouseover", pick);
  tokens.addEventListener("focusin", pick);
  window.addEventListener("hashchange", render);
  render();
  // ms from navigation start (parsing, inflating the data, drawing the first update) to the
  // end of the first render: benchmarks/bench_token_view.py reads it
  document.body.dataset.renderMs = performance.now().toFixed(0);
}

main().catch((e) => report(`script error: ${e.stack || e}`));
