// The colour kitchen's pages: a target matched to candidate recipes, shown as colours, and a
// dip that came out off-shade corrected.

import { fmt, h } from "./dom.js";
import { ApiError, api, failure, may } from "./session.js";

/** CIELAB (10° observer, relative to the illuminant's white) to an sRGB colour for the screen,
 * as the eye adapted to that illuminant sees it: Lab → XYZ relative to the display's own white
 * (sRGB's D65, so that the illuminant's white shows as the screen's white) → sRGB (IEC
 * 61966-2-1), clipped to the gamut. */
function labToCss({ l, a, b }) {
  const white = [95.047, 100.0, 108.883]; // sRGB's D65
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

/** A target: its `spectra` and any named features it gives, from JSON ({start_nm, interval_nm,
 * values} or a whole match body) or CSV (cells separated by commas, or by semicolons or tabs with
 * decimal commas allowed): rows of `wavelength,value` (under an optional header
 * row), or a header row over one row of values, where `…nm` (or plain number) columns are the
 * spectrum, columns named as the model's features are those, and any other column, such as a
 * recipe, is left out. The wavelengths must be evenly spaced; they may come in either order. */
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
  // Spreadsheets where the comma is the decimal mark separate cells by semicolons (or tabs, when
  // copied): on such a line a number's one comma is its decimal point (on a tab-separated line
  // only where no number cell of the text has a decimal point), never a separator.
  const separatorOf = (line) => (line.includes(";") ? ";" : line.includes("\t") ? "\t" : /[,;\t]/);
  const commaNumber = /^[-+]?(\d+,\d*|,\d+)(e[-+]?\d+)?(\s*nm)?$/i;
  const pointNumber = /^[-+]?(\d+\.\d*|\.\d+)(e[-+]?\d+)?(\s*nm)?$/i;
  const split = trimmed.split(/\r?\n/).map((line) => {
    const separator = separatorOf(line);
    return { separator, cells: line.split(separator).map((c) => c.trim()) };
  });
  const pointsUsed = split.some(({ cells }) => cells.some((c) => pointNumber.test(c)));
  const lines = split.map(({ separator, cells }) => {
    const decimalComma = separator === ";" || (separator === "\t" && !pointsUsed);
    return cells.map((c) => (decimalComma && commaNumber.test(c) ? c.replace(",", ".") : c));
  }).filter((l) => l.some((c) => c !== ""));
  const wavelength = (c) => (/^\d+(\.\d+)?\s*(nm)?$/i.test(c) ? Number.parseFloat(c) : NaN);
  const value = (c) => (c === "" ? NaN : Number(c));
  const isPair = (l) => l.length === 2 && Number.isFinite(wavelength(l[0]));
  let pairs;
  const features = {};
  if (lines.length >= 2 && lines.slice(1).every(isPair)) {
    // Rows of wavelength,value, the first perhaps a header.
    pairs = (isPair(lines[0]) ? lines : lines.slice(1)).map(([w, v]) => [wavelength(w), value(v)]);
  } else if (lines.length === 2 && lines[0].length === lines[1].length) {
    const [header, values] = lines;
    pairs = [];
    header.forEach((name, j) => {
      if (Number.isFinite(wavelength(name))) pairs.push([wavelength(name), value(values[j])]);
      else if (featureNames.includes(name)) features[name] = value(values[j]);
    });
  } else if (lines.length > 2 && lines.every((l) => l.length === lines[0].length)) {
    throw new Error(`one target at a time: the CSV has ${lines.length - 1} rows of values`);
  } else {
    throw new Error("the CSV must be rows of wavelength,value or a header row over a row of values");
  }
  pairs.sort((p, q) => p[0] - q[0]);
  const blank = pairs.find(([, v]) => !Number.isFinite(v));
  if (blank) throw new Error(`no number at ${blank[0]} nm`);
  if (pairs.length < 2) throw new Error("the target needs at least two wavelengths");
  const interval = pairs[1][0] - pairs[0][0];
  const uneven = pairs.findIndex(([w], i) => Math.abs(w - (pairs[0][0] + i * interval)) > 1e-6 * Math.max(1, w));
  if (!(interval > 0) || uneven >= 0) {
    throw new Error("the wavelengths must be evenly spaced, each once");
  }
  for (const [name, v] of Object.entries(features)) {
    if (!Number.isFinite(v)) throw new Error(`no number for ${name}`);
  }
  return {
    spectra: { start_nm: pairs[0][0], interval_nm: interval, values: [pairs.map(([, v]) => v)] },
    features,
  };
}

export async function matchPage(name) {
  document.getElementById("where").textContent = `${name} · match`;
  const model = await api("GET", `models/${encodeURIComponent(name)}`);
  if (!model.spectrum || model.transform === "none") {
    return [h("h1", {}, `Match a target: ${name}`), h("p", { class: "error", role: "alert" },
      `${name} cannot match recipes: that needs a model of reflectance spectra under Kubelka–Munk ` +
      "or Saunderson.")];
  }
  const target = h("textarea", { id: "target", spellcheck: "false",
    placeholder: "400nm,410nm,…\n41.2,40.8,…   or   {\"start_nm\": 400, \"interval_nm\": 10, \"values\": [41.2, …]}" });
  const file = h("input", { type: "file", accept: ".csv,.json,.txt", id: "target-file" });
  file.addEventListener("change", async () => {
    if (file.files.length) target.value = await file.files[0].text();
  });
  const tolerance = h("input", { type: "number", step: "0.1", min: "0.1", value: "1.0", id: "tolerance", size: 5 });
  const maxDyes = h("input", { type: "number", min: "1", max: "4", value: "3", id: "max-dyes", size: 3 });
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
  return [h("h1", {}, `Match a target: ${name}`), form, out, correction.form, correction.out];
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
    answer.learnt ? h("p", { class: "quiet learnt" }, `learnt as batch ${answer.learnt.batch_id}` +
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
