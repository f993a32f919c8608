// The lab console: a page of the service that reads and acts through its public API only,
// with the key its user gives (kept in this tab's session storage, never anywhere else).
// No framework and no build step: the browser runs this file as the service serves it.

const API = new URL("../v1/", location.href);
const KEY_ITEM = "mordant.console.key";
const PALETTE = ["#1f5fa8", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207",
  "#be185d", "#4d7c0f", "#1e3a8a"];

let caller = null; // the key's name and scopes, from GET /v1/keys/self

// ---------------------------------------------------------------- DOM helpers

/** An HTML element; text children are text nodes, never markup. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "colour") el.style.backgroundColor = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An SVG element. */
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function show(...children) {
  const main = document.getElementById("main");
  main.replaceChildren(...children.flat());
}

function fmt(value, digits = 4) {
  if (value === null || value === undefined) return "—";
  if (typeof value !== "number") return String(value);
  if (value !== 0 && (Math.abs(value) < 1e-3 || Math.abs(value) >= 1e5)) return value.toExponential(2);
  return Number(value.toPrecision(digits)).toString();
}

function when(stamp) {
  if (!stamp) return "—";
  const date = new Date(stamp);
  return date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

// ---------------------------------------------------------------- the API

class ApiError extends Error {
  constructor(status, body) {
    const message = body && body.error ? body.error.message : `HTTP ${status}`;
    super(message);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = { accept: "application/json" };
  const key = sessionStorage.getItem(KEY_ITEM);
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(new URL(path, API), {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
  });
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) throw new ApiError(response.status, parsed);
  return parsed;
}

/** Whether the key holds one of `scopes` (admin holds every scope). */
function may(...scopes) {
  return caller !== null && caller.scopes.some((s) => s === "admin" || scopes.includes(s));
}

function failure(error) {
  if (error instanceof ApiError && error.status === 401) {
    sessionStorage.removeItem(KEY_ITEM);
    caller = null;
    return keyForm("The service did not accept the key: " + error.message);
  }
  return h("p", { class: "error", role: "alert" }, error.message);
}

// ---------------------------------------------------------------- the key

function keyForm(problem) {
  const input = h("input", { type: "password", name: "key", autocomplete: "off", required: true,
    placeholder: "mdk_…", size: 48, "aria-label": "API key" });
  const form = h("form", { class: "key card", id: "key-form" },
    h("h1", {}, "Sign in with an API key"),
    h("p", { class: "quiet" }, "The console sends it as the API expects (Authorization: Bearer) and " +
      "keeps it in this browser tab only: closing the tab forgets it."),
    problem ? h("p", { class: "error", role: "alert" }, problem) : null,
    input,
    h("div", {}, h("button", { type: "submit" }, "Use this key")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_ITEM, input.value.trim());
    await start();
  });
  return form;
}

function whoLine() {
  const who = document.getElementById("who");
  if (!caller) {
    who.replaceChildren();
    return;
  }
  const name = caller.enforced ? caller.name : "keys not enforced";
  const forget = h("button", { class: "secondary", id: "forget-key", onclick: () => {
    sessionStorage.removeItem(KEY_ITEM);
    caller = null;
    whoLine();
    show(keyForm());
  } }, "Forget key");
  who.replaceChildren(`${name} · ${caller.scopes.join(", ")} `, caller.enforced ? forget : "");
}

// ---------------------------------------------------------------- charts

/**
 * A line (or dot) chart of `series` ([{name, colour, points: [[x, y]], dots}]) with an optional
 * horizontal `rule` ({y, label}); `log` plots y on a log scale.
 */
function chart({ series, width = 540, height = 220, xLabel = "", yLabel = "", log = false, rule = null,
  id = null }) {
  const pad = { left: 58, right: 12, top: 22, bottom: 34 };
  const ty = (y) => (log ? Math.log10(y) : y);
  const points = series.flatMap((one) => one.points).filter(([, y]) => Number.isFinite(y) && (!log || y > 0));
  const svg = s("svg", { class: "chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": yLabel, ...(id ? { id } : {}) });
  if (points.length === 0) {
    svg.append(s("text", { x: width / 2, y: height / 2, "text-anchor": "middle" }, "nothing to plot yet"));
    return svg;
  }
  let [x0, x1] = [Math.min(...points.map((p) => p[0])), Math.max(...points.map((p) => p[0]))];
  let ys = points.map((p) => ty(p[1]));
  if (rule) ys = ys.concat([ty(rule.y)]);
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x1 === x0) [x0, x1] = [x0 - 1, x1 + 1];
  if (y1 === y0) [y0, y1] = [y0 - 1, y1 + 1];
  const margin = (y1 - y0) * 0.06;
  [y0, y1] = [y0 - margin, y1 + margin];
  const X = (x) => pad.left + ((x - x0) / (x1 - x0)) * (width - pad.left - pad.right);
  const Y = (y) => height - pad.bottom - ((ty(y) - y0) / (y1 - y0)) * (height - pad.top - pad.bottom);
  svg.append(s("line", { x1: pad.left, y1: height - pad.bottom, x2: width - pad.right, y2: height - pad.bottom,
    stroke: "#9aa3b0" }));
  svg.append(s("line", { x1: pad.left, y1: pad.top, x2: pad.left, y2: height - pad.bottom, stroke: "#9aa3b0" }));
  for (const t of [0, 0.5, 1]) {
    const yv = y0 + t * (y1 - y0);
    const label = log ? fmt(10 ** yv, 2) : fmt(yv, 3);
    const py = height - pad.bottom - t * (height - pad.top - pad.bottom);
    svg.append(s("text", { x: pad.left - 4, y: py + 4, "text-anchor": "end" }, label));
    const xv = x0 + t * (x1 - x0);
    svg.append(s("text", { x: X(xv), y: height - pad.bottom + 14, "text-anchor": "middle" }, fmt(xv, 4)));
  }
  svg.append(s("text", { x: (pad.left + width - pad.right) / 2, y: height - 4, "text-anchor": "middle" }, xLabel));
  svg.append(s("text", { x: 8, y: 13, "text-anchor": "start" }, yLabel));
  if (rule && (!log || rule.y > 0)) {
    svg.append(s("line", { x1: pad.left, x2: width - pad.right, y1: Y(rule.y), y2: Y(rule.y),
      stroke: "#b3261e", "stroke-dasharray": "5 4" }));
    svg.append(s("text", { x: width - pad.right - 2, y: Y(rule.y) - 4, "text-anchor": "end" }, rule.label));
  }
  for (const one of series) {
    const usable = one.points.filter(([, y]) => Number.isFinite(y) && (!log || y > 0));
    if (one.dots && usable.length > 0) {
      // One path of round dots (a zero-length segment each): thousands of points stay one element.
      const d = usable.map(([x, y]) => `M${X(x).toFixed(1)},${Y(y).toFixed(1)}h0`).join("");
      svg.append(s("path", { d, class: "dots", "data-points": usable.length, fill: "none", stroke: one.colour,
        "stroke-width": 5, "stroke-linecap": "round" }));
    } else if (usable.length > 0) {
      const d = usable.map(([x, y], i) => `${i ? "L" : "M"}${X(x).toFixed(1)},${Y(y).toFixed(1)}`).join("");
      svg.append(s("path", { d, fill: "none", stroke: one.colour, "stroke-width": 1.6 }));
    }
  }
  return svg;
}

function legend(series) {
  return h("div", { class: "legend" },
    series.map((one) => h("span", {}, h("i", { colour: one.colour }), one.name)));
}

// ---------------------------------------------------------------- colour

/** CIELAB (10° observer, relative to the illuminant's white) to an sRGB colour for the screen,
 * as the eye adapted to that illuminant sees it: Lab → XYZ with D65's white → sRGB (IEC
 * 61966-2-1), clipped to the gamut. */
function labToCss({ l, a, b }) {
  const white = [94.811, 100.0, 107.304]; // D65, 10°
  const fy = (l + 16) / 116;
  const fx = fy + a / 500;
  const fz = fy - b / 200;
  const inv = (t) => (t ** 3 > 216 / 24389 ? t ** 3 : (116 * t - 16) / (24389 / 27));
  const [x, y, z] = [inv(fx), inv(fy), inv(fz)].map((v, i) => (v * white[i]) / 100);
  const linear = [
    3.2404542 * x - 1.5371385 * y - 0.4985314 * z,
    -0.969266 * x + 1.8760108 * y + 0.041556 * z,
    0.0556434 * x - 0.2040259 * y + 1.0572252 * z,
  ];
  const gamma = (c) => {
    const v = Math.min(Math.max(c, 0), 1);
    return Math.round(255 * (v <= 0.0031308 ? 12.92 * v : 1.055 * v ** (1 / 2.4) - 0.055));
  };
  return `rgb(${linear.map(gamma).join(", ")})`;
}

function swatch(lab, title) {
  return h("span", { class: "swatch", colour: labToCss(lab), title });
}

// ---------------------------------------------------------------- pages

async function modelsPage() {
  document.getElementById("where").textContent = "Models";
  const { models } = await api("GET", "models");
  const rows = models.map((m) => h("tr", { "data-model": m.name },
    h("td", {}, h("a", { href: `#/models/${encodeURIComponent(m.name)}` }, m.name)),
    h("td", { class: "num" }, m.version),
    h("td", { class: "num" }, fmt(m.observations, 6)),
    h("td", { class: "num" }, m.pending_batches),
    h("td", { class: "num" }, m.held_batches > 0 ? h("span", { class: "alarm" }, m.held_batches) : "0"),
    h("td", {}, when(m.version_created_at)),
    h("td", {}, m.drift_threshold === null ? h("span", { class: "quiet" }, "off") : fmt(m.drift_threshold)),
    h("td", {}, m.spectrum && m.transform !== "none" && may("predict")
      ? h("a", { href: `#/match/${encodeURIComponent(m.name)}` }, "match") : "")));
  show(h("h1", {}, "Models"),
    models.length === 0 ? h("p", { class: "quiet" }, "No models yet.") :
      h("table", { id: "models" },
        h("thead", {}, h("tr", {}, h("th", {}, "model"), h("th", { class: "num" }, "version"),
          h("th", { class: "num" }, "observations"), h("th", { class: "num" }, "pending"),
          h("th", { class: "num" }, "held (drift alarms)"), h("th", {}, "last version"),
          h("th", {}, "drift threshold"), h("th", {}, ""))),
        h("tbody", {}, rows)));
}

async function modelPage(name) {
  document.getElementById("where").textContent = name;
  const path = `models/${encodeURIComponent(name)}`;
  // Everything at once; the posterior as soon as the model says it has one.
  const modelAsked = api("GET", path);
  const [model, versions, batches, posterior] = await Promise.all([
    modelAsked,
    api("GET", `${path}/versions`),
    may("ingest") ? api("GET", `${path}/batches?limit=1000`) : Promise.resolve(null),
    modelAsked.then((m) => (m.version > 0 ? api("GET", `${path}/posterior`) : null)),
  ]);
  const sections = [
    h("h1", {}, model.name),
    h("p", {}, `version ${model.version} · ${fmt(model.observations, 6)} observations · ` +
      `${model.pending_batches} pending · `,
      model.held_batches > 0 ? h("span", { class: "alarm" }, `${model.held_batches} held`) : "0 held",
      ` · prior ${model.prior} · `, model.spectrum ? `spectrum of ${model.spectrum.count} bands` :
        `${model.features.length} features`,
      model.successor ? ` · successor instrument: ${model.successor.answered_by.join(" + ")}` : ""),
  ];
  sections.push(versionsSection(model, versions.versions));
  if (batches) sections.push(batchesSection(model, batches.batches));
  if (posterior) sections.push(relevanceSection(model, posterior));
  if (model.spectrum && model.transform !== "none" && may("predict")) {
    sections.push(h("p", {}, h("a", { href: `#/match/${encodeURIComponent(model.name)}` },
      "Match a target with this model →")));
  }
  show(sections);
}

function originColour(origin) {
  return { fold: "#1f5fa8", restore: "#c2410c", refit: "#7e22ce", extend: "#15803d" }[origin] || "#5b6677";
}

function versionsSection(model, versions) {
  const chronological = [...versions].sort((a, b) => a.version - b.version);
  const noise = model.outputs.map((output, k) => ({
    name: `σ² ${output}`,
    colour: PALETTE[k % PALETTE.length],
    points: chronological.map((v) => [v.version, v.noise_variances[k]]),
  }));
  const made = ["fold", "restore", "refit", "extend"].map((origin) => ({
    name: origin,
    colour: originColour(origin),
    dots: true,
    points: chronological.filter((v) => v.origin === origin).map((v) => [v.version, v.observations]),
  })).filter((one) => one.points.length > 0);
  const admin = may("admin");
  const recent = [...versions].sort((a, b) => b.version - a.version).slice(0, 15);
  const table = h("table", { id: "versions" },
    h("thead", {}, h("tr", {}, h("th", { class: "num" }, "version"), h("th", {}, "made"),
      h("th", {}, "by"), h("th", { class: "num" }, "observations"), h("th", { class: "num" }, "batches"),
      admin ? h("th", {}, "") : null)),
    h("tbody", {}, recent.map((v) => h("tr", {},
      h("td", { class: "num" }, v.version), h("td", {}, when(v.created_at)),
      h("td", {}, h("span", { class: "badge" }, v.origin === "restore" ? `restore of ${v.restored_from}` : v.origin)),
      h("td", { class: "num" }, fmt(v.observations, 6)), h("td", { class: "num" }, v.batches.length),
      admin ? h("td", {}, v.version === model.version ? h("span", { class: "quiet" }, "current") :
        h("button", { class: "secondary", "data-restore": v.version,
          onclick: () => act(`Restore ${model.name} to version ${v.version}? Predictions will be served ` +
            `from a copy of it until the next fold.`, "POST",
            `models/${encodeURIComponent(model.name)}/versions/${v.version}/restore`) }, "restore")) : null))));
  return h("section", { id: "versions-section" },
    h("h2", {}, "Versions over time"),
    h("div", { class: "row" },
      h("div", {}, chart({ series: made, xLabel: "version", yLabel: "observations", id: "chart-observations" }),
        legend(made)),
      h("div", {}, chart({ series: noise, xLabel: "version", yLabel: "σ² per output (log)", log: true,
        id: "chart-noise" }), legend(noise.slice(0, 10)))),
    admin ? h("p", {}, h("button", { class: "secondary", id: "refit",
      onclick: () => act(`Refit ${model.name}? Every output's prior is fitted again from all the rows ` +
        "learnt so far (no row is read again).", "POST", `models/${encodeURIComponent(model.name)}/refit`) },
    "Refit the model")) : null,
    table);
}

function batchesSection(model, batches) {
  const chronological = [...batches].reverse();
  const worst = (b) => (b.surprise ? Math.max(...b.surprise.filter((z) => z !== null)) : NaN);
  const byStatus = ["folded", "held", "rejected"].map((status, i) => ({
    name: status,
    colour: ["#1f5fa8", "#b3261e", "#5b6677"][i],
    dots: true,
    points: chronological.map((b, k) => [k + 1, b.status === status ? worst(b) : NaN]),
  })).filter((one) => one.points.some(([, y]) => Number.isFinite(y) && y > 0));
  const held = batches.filter((b) => b.status === "held");
  const admin = may("admin");
  const rule = model.drift_threshold === null ? null : { y: model.drift_threshold, label: "threshold" };
  return h("section", { id: "batches-section" },
    h("h2", {}, "Batches: how surprising each was"),
    h("p", { class: "quiet" }, "Per batch, its largest surprise over the outputs (about 1 when the batch agrees " +
      "with the model), oldest first; a batch above the threshold is held for review."),
    chart({ series: byStatus, width: 1000, xLabel: `batch (the last ${batches.length})`,
      yLabel: "surprise (log)", log: true, rule, id: "chart-surprise" }),
    legend(byStatus),
    h("h2", {}, `Held for review (${held.length})`),
    held.length === 0 ? h("p", { class: "quiet" }, "No batch is held.") :
      h("table", { id: "held" },
        h("thead", {}, h("tr", {}, h("th", {}, "batch"), h("th", { class: "num" }, "rows"),
          h("th", {}, "received"), h("th", { class: "num" }, "surprise"), admin ? h("th", {}, "") : null)),
        h("tbody", {}, held.map((b) => h("tr", { "data-batch": b.batch_id },
          h("td", {}, b.batch_id), h("td", { class: "num" }, b.rows), h("td", {}, when(b.received_at)),
          h("td", { class: "num" }, fmt(worst(b), 3)),
          admin ? h("td", {},
            h("button", { class: "release", onclick: () => act(null, "POST",
              `models/${encodeURIComponent(model.name)}/batches/${encodeURIComponent(b.batch_id)}/release`) },
            "release"), " ",
            h("button", { class: "reject danger", onclick: () => act(`Reject batch ${b.batch_id}? It will ` +
              "never be learnt.", "POST",
              `models/${encodeURIComponent(model.name)}/batches/${encodeURIComponent(b.batch_id)}/reject`) },
            "reject")) : null)))));
}

function relevanceSection(model, posterior) {
  const outputs = posterior.outputs.filter((o) => o.trained);
  if (outputs.length === 0) return h("p", { class: "quiet" }, "No output is trained yet.");
  const spectrum = model.spectrum;
  const bands = spectrum ? spectrum.count : 0;
  const select = h("select", { id: "relevance-output", "aria-label": "output" },
    outputs.map((o) => h("option", { value: o.name }, o.name)));
  const holder = h("div", {});
  const draw = () => {
    const output = outputs.find((o) => o.name === select.value) || outputs[0];
    if (spectrum) {
      const wavelength = (j) => spectrum.start_nm + j * spectrum.interval_nm;
      const coefficients = [{ name: "coefficient", colour: "#1f5fa8",
        points: output.coefficients.slice(0, bands).map((c, j) => [wavelength(j), c]) }];
      // Dots: ARD prunes bands (prior variance 0), which a log scale cannot draw.
      const variances = [{ name: "prior variance", colour: "#c2410c", dots: true,
        points: output.prior_variance.slice(0, bands).map((v, j) => [wavelength(j), v]) }];
      const pruned = output.prior_variance.slice(0, bands).filter((v) => v === 0).length;
      holder.replaceChildren(h("div", { class: "row" },
        h("div", {}, chart({ series: coefficients, xLabel: "wavelength (nm)", yLabel: "coefficient",
          id: "chart-coefficients" })),
        h("div", {}, chart({ series: variances, xLabel: "wavelength (nm)", yLabel: "prior variance (log)",
          log: true, id: "chart-prior" }))),
      h("p", { class: "quiet" }, `prior ${output.prior}` + (output.length_scale_nm ?
        `, length scale ${fmt(output.length_scale_nm, 3)} nm` : "") + `, σ² ${fmt(output.noise_variance)}` +
        (pruned ? `; ${pruned} of ${bands} bands pruned (prior variance 0, not drawn)` : "")));
    } else {
      holder.replaceChildren(h("table", { id: "ranked" },
        h("thead", {}, h("tr", {}, h("th", {}, "input"), h("th", { class: "num" }, "prior variance"))),
        h("tbody", {}, output.ranked_features.slice(0, 25).map((f) => h("tr", {},
          h("td", {}, f.name), h("td", { class: "num" }, fmt(f.prior_variance)))))));
    }
  };
  select.addEventListener("change", draw);
  draw();
  return h("section", { id: "relevance-section" },
    h("h2", {}, spectrum ? "Relevance over wavelength" : "Relevance of the inputs"),
    h("label", {}, "output ", select), holder);
}

/** Confirms (when `question` is given), calls the API, then shows the page again. */
async function act(question, method, path) {
  if (question && !window.confirm(question)) return;
  try {
    await api(method, path);
    await render();
  } catch (error) {
    document.getElementById("main").prepend(failure(error));
  }
}

// ---------------------------------------------------------------- match

/** A target: its `spectra` and any named features it gives, from JSON ({start_nm, interval_nm,
 * values} or a whole match body) or CSV (rows of `wavelength,value`, or a header row over a row
 * of values: `…nm` columns are the spectrum, columns named as the model's features are those,
 * any other column, such as a recipe, is left out). */
function parseTarget(text, featureNames) {
  const trimmed = text.trim();
  if (trimmed.startsWith("{")) {
    const body = JSON.parse(trimmed);
    const features = {};
    if (body.spectra) {
      if (Array.isArray(body.x) && Array.isArray(body.x[0])) {
        featureNames.forEach((name, j) => { features[name] = body.x[0][j]; });
      }
      return { spectra: body.spectra, features };
    }
    if (Array.isArray(body.values) && !Array.isArray(body.values[0])) {
      return { spectra: { ...body, values: [body.values] }, features };
    }
    return { spectra: body, features };
  }
  const lines = trimmed.split(/\r?\n/).map((l) => l.split(/[,;\t]/).map((c) => c.trim()))
    .filter((l) => l[0] !== "");
  const wavelength = (c) => (/^\d+(\.\d+)?\s*(nm)?$/i.test(c) ? Number.parseFloat(c) : NaN);
  let pairs;
  const features = {};
  if (lines.every((l) => l.length === 2 && Number.isFinite(wavelength(l[0])))) {
    pairs = lines.map(([w, v]) => [wavelength(w), Number(v)]);
  } else if (lines.length >= 2 && lines[0].length === lines[1].length) {
    const [header, values] = lines;
    pairs = [];
    header.forEach((name, j) => {
      if (Number.isFinite(wavelength(name))) pairs.push([wavelength(name), Number(values[j])]);
      else if (featureNames.includes(name)) features[name] = Number(values[j]);
    });
  } else {
    throw new Error("the CSV must be rows of wavelength,value or a header row over a row of values");
  }
  if (pairs.length < 2 || pairs.some(([w, v]) => !Number.isFinite(w) || !Number.isFinite(v))) {
    throw new Error("the target needs at least two wavelengths, each with a number");
  }
  return {
    spectra: { start_nm: pairs[0][0], interval_nm: pairs[1][0] - pairs[0][0], values: [pairs.map(([, v]) => v)] },
    features,
  };
}

async function matchPage(name) {
  document.getElementById("where").textContent = `${name} · match`;
  const model = await api("GET", `models/${encodeURIComponent(name)}`);
  const target = h("textarea", { id: "target", spellcheck: "false",
    placeholder: "400nm,410nm,…\n41.2,40.8,…   or   {\"start_nm\": 400, \"interval_nm\": 10, \"values\": [41.2, …]}" });
  const file = h("input", { type: "file", accept: ".csv,.json,.txt", id: "target-file" });
  file.addEventListener("change", async () => {
    if (file.files.length) target.value = await file.files[0].text();
  });
  const tolerance = h("input", { type: "number", step: "0.1", min: "0.1", value: "1.0", id: "tolerance", size: 5 });
  const maxDyes = h("input", { type: "number", min: "1", max: "6", value: "3", id: "max-dyes", size: 3 });
  const featureInputs = model.features.map((feature) =>
    h("input", { type: "number", step: "any", value: "0", name: feature, size: 5, "data-feature": feature }));
  const out = h("div", { id: "match-result" });
  const form = h("form", { id: "match-form", class: "card" },
    h("p", {}, `Paste or load the target's spectrum (on the model's scale: ${model.spectrum.scale}), ` +
      "as a spectrophotometer's CSV or as JSON."),
    target, h("p", { class: "row" }, file, h("label", {}, "tolerance ΔE00", tolerance),
      h("label", {}, "at most", maxDyes, "dyes"), h("button", { type: "submit" }, "Match")),
    featureInputs.length ? h("p", { class: "row" }, h("span", { class: "quiet" },
      "Named features (a CSV column of the same name overrides):"),
    featureInputs.map((input) => h("label", {}, input.name, input))) : null);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    out.replaceChildren(h("p", { class: "quiet" }, "Matching…"));
    try {
      const { spectra, features } = parseTarget(target.value, model.features);
      for (const input of featureInputs) {
        if (input.name in features) input.value = String(features[input.name]);
      }
      const body = { spectra, max_dyes: Number(maxDyes.value), tolerance: { de00: Number(tolerance.value) } };
      if (featureInputs.length) {
        body.x = [featureInputs.map((input) => (input.name in features ? features[input.name] : Number(input.value)))];
      }
      const answer = await api("POST", `models/${encodeURIComponent(name)}/match`, body);
      out.replaceChildren(matchResult(answer, model.outputs));
    } catch (error) {
      out.replaceChildren(error instanceof ApiError ? failure(error) :
        h("p", { class: "error", role: "alert" }, error.message));
    }
  });
  const correction = correctionForm(model, () => {
    const { spectra, features } = parseTarget(target.value, model.features);
    const x = featureInputs.length ?
      [featureInputs.map((input) => (input.name in features ? features[input.name] : Number(input.value)))] : null;
    return { spectra, x, tolerance: { de00: Number(tolerance.value) } };
  });
  out.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-recipe-text]");
    if (!button) return;
    correction.recipe.value = button.dataset.recipeText;
    correction.form.scrollIntoView();
  });
  show(h("h1", {}, `Match a target: ${name}`), form, out, correction.form, correction.out);
}

/** Dye amounts as `dye=amount, …`, and back. */
function recipeText(dyes, amounts) {
  return dyes.map((dye, k) => `${dye}=${Number(amounts[k].toPrecision(4))}`).join(", ");
}

function parseRecipe(text) {
  const recipe = {};
  for (const part of text.split(/[,;\n]/).map((p) => p.trim()).filter(Boolean)) {
    const [dye, amount] = part.split("=").map((p) => p.trim());
    const value = Number(amount);
    if (!dye || amount === undefined || !Number.isFinite(value)) {
      throw new Error(`the recipe must read dye=amount, …; found ${JSON.stringify(part)}`);
    }
    recipe[dye] = value;
  }
  return recipe;
}

/** The correction of a dip that came out off-shade: the recipe dyed, the dip's measurement. */
function correctionForm(model, targetOf) {
  const recipe = h("input", { id: "dyed-recipe", size: 60, placeholder: "yellow_1=0.12, red_1=1.05" });
  const measured = h("textarea", { id: "dip", spellcheck: "false",
    placeholder: "The dip's measured spectrum: CSV or JSON, as the target" });
  const learn = h("input", { type: "checkbox", id: "learn" });
  const out = h("div", { id: "correct-result" });
  const form = h("form", { id: "correct-form", class: "card" },
    h("h2", {}, "Correct a dip"),
    h("p", { class: "quiet" }, "A dip dyed with a recipe came out off-shade: its measurement shows where the " +
      "model is wrong near that recipe, and the correction assumes that error persists (the dye house's " +
      "conditions, a lot of dye or fabric)."),
    h("p", {}, h("label", {}, "recipe dyed", recipe)), measured,
    h("p", { class: "row" }, may("ingest") ? h("label", {}, learn, "also learn the dip as an observation") : null,
      h("button", { type: "submit" }, "Correct")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    out.replaceChildren(h("p", { class: "quiet" }, "Correcting…"));
    try {
      const { spectra, x, tolerance } = targetOf();
      const dip = parseTarget(measured.value, model.features).spectra;
      const body = { spectra, recipe: parseRecipe(recipe.value), tolerance,
        measured: { start_nm: dip.start_nm, interval_nm: dip.interval_nm, values: dip.values[0] } };
      if (x) body.x = x;
      if (learn.checked) body.learn = true;
      const answer = await api("POST", `models/${encodeURIComponent(model.name)}/correct`, body);
      out.replaceChildren(correctionResult(answer, model.outputs));
    } catch (error) {
      out.replaceChildren(error instanceof ApiError ? failure(error) :
        h("p", { class: "error", role: "alert" }, error.message));
    }
  });
  return { form, out, recipe };
}

function correctionResult(answer, outputs) {
  const dip = answer.dip;
  const dipD65 = illuminant(dip, "D65");
  const dipA = illuminant(dip, "A");
  return h("div", {}, (answer.warnings || []).map((w) => h("p", { class: "quiet" }, `${w.path}: ${w.message}`)),
    dip ? h("p", { id: "dip-colour" }, "the dip against the target: ",
      h("span", { class: "swatches" }, swatch(dipD65.reference, "target under D65"),
        swatch(dipD65.sample, "dip under D65")), ` ΔE00 ${fmt(dipD65.de00, 3)} (D65), `,
      h("span", { class: "swatches" }, swatch(dipA.reference, "target under A"), swatch(dipA.sample, "dip under A")),
      ` ${fmt(dipA.de00, 3)} (A) `, h("span", { class: dip.verdict === "pass" ? "pass" : "fail" }, dip.verdict)) : null,
    h("table", { class: "candidates", id: "corrected" }, candidateHead(),
      h("tbody", {}, candidateRow(answer.recipe, outputs))),
    answer.learnt ? h("p", { class: "quiet" }, `learnt as batch ${answer.learnt.batch.batch_id}` +
      (answer.learnt.replayed ? " (stored before)" : "")) : null);
}

function illuminant(colour, name) {
  return colour ? colour.illuminants.find((i) => i.illuminant === name) : undefined;
}

/** The candidates per target; a candidate's `concentration` and `variance` are per output. */
function matchResult(answer, outputs) {
  return h("div", {}, (answer.warnings || []).map((w) => h("p", { class: "quiet" }, `${w.path}: ${w.message}`)),
    answer.recipes.map((recipe, r) => {
      // The recipe is its best candidate, with the whole list beside it.
      const candidates = recipe.candidates && recipe.candidates.length ? recipe.candidates : [recipe];
      const first = candidates[0];
      const d65 = illuminant(first.colour, "D65");
      const a = illuminant(first.colour, "A");
      return h("section", { class: "recipe", "data-recipe": r },
        h("h2", {}, `Target ${r + 1}`),
        d65 ? h("p", { class: "swatches" }, "target: D65 ", swatch(d65.reference, "target under D65"),
          " A ", swatch(a.reference, "target under A")) : null,
        h("table", { class: "candidates" }, candidateHead(),
          h("tbody", {}, candidates.map((c) => candidateRow(c, outputs)))));
    }));
}

function candidateHead() {
  return h("thead", {}, h("tr", {}, h("th", {}, "recipe (D65 · A)"), h("th", {}, "dyes (% owf ± sd)"),
    h("th", { class: "num" }, "ΔE00 D65"), h("th", { class: "num" }, "ΔE00 A"),
    h("th", { class: "num" }, "ΔE00 F11"), h("th", { class: "num" }, "cost"), h("th", {}, "verdict"),
    h("th", {}, "")));
}

/** One recipe: swatches under D65 and A, the dyes with their amounts, its colour differences
 * (under A and F11: metamerism), cost and verdict; a candidate's `concentration` and `variance`
 * are per output. */
function candidateRow(c, outputs) {
  const [cd65, ca, cf11] = ["D65", "A", "F11"].map((n) => illuminant(c.colour, n));
  const amounts = c.dyes.map((dye) => c.concentration[outputs.indexOf(dye)]);
  return h("tr", { class: "candidate" },
    h("td", {}, cd65 ? h("span", { class: "swatches" }, swatch(cd65.sample, "under D65"),
      swatch(ca.sample, "under A")) : "—"),
    h("td", { class: "dyes" }, c.dyes.map((dye, k) => {
      const v = c.variance[outputs.indexOf(dye)];
      const sd = v === null ? "" : ` ± ${fmt(Math.sqrt(v), 2)}`;
      return `${dye} ${fmt(amounts[k], 3)}${sd}`;
    }).join(", ")),
    h("td", { class: "num de00" }, cd65 ? fmt(cd65.de00, 3) : "—"),
    h("td", { class: "num" }, ca ? fmt(ca.de00, 3) : "—"),
    h("td", { class: "num" }, cf11 ? fmt(cf11.de00, 3) : "—"),
    h("td", { class: "num" }, c.cost === null || c.cost === undefined ? "—" : fmt(c.cost, 4)),
    h("td", {}, c.colour ? h("span", { class: c.colour.verdict === "pass" ? "pass" : "fail" },
      c.colour.verdict) : "—"),
    h("td", {}, h("button", { class: "secondary", type: "button", "data-recipe-text": recipeText(c.dyes, amounts),
      title: "Dyed this recipe? Correct its dip below." }, "dyed it")));
}

// ---------------------------------------------------------------- routing

async function render() {
  const route = location.hash.replace(/^#/, "") || "/";
  const [, page, name] = route.split("/").map(decodeURIComponent);
  try {
    if (page === "models" && name) await modelPage(name);
    else if (page === "match" && name) await matchPage(name);
    else await modelsPage();
  } catch (error) {
    show(failure(error));
  }
  // For the benchmark (bench/console): when the page's content was on screen.
  performance.mark("console:rendered");
}

async function start() {
  try {
    caller = await api("GET", "keys/self");
  } catch (error) {
    const stored = sessionStorage.getItem(KEY_ITEM);
    sessionStorage.removeItem(KEY_ITEM);
    caller = null;
    whoLine();
    show(keyForm(stored ? `The service did not accept the key: ${error.message}` : error.message));
    return;
  }
  if (caller.scopes.length === 0) {
    // Keys are enforced and none was given.
    caller = null;
    whoLine();
    show(keyForm());
    return;
  }
  whoLine();
  await render();
}

window.addEventListener("hashchange", render);
start();
