// The models page and a model's page: versions, batches and their surprise, relevance, and the
// admin's actions on them.

import { chart, legend, PALETTE } from "./charts.js";
import { fmt, h, when } from "./dom.js";
import { act, api, may } from "./session.js";

/** The models, each with its queue and drift alarms. */
export async function modelsPage() {
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
  return [h("h1", {}, "Models"),
    models.length === 0 ? h("p", { class: "quiet" }, "No models yet.") :
      h("table", { id: "models" },
        h("thead", {}, h("tr", {}, h("th", {}, "model"), h("th", { class: "num" }, "version"),
          h("th", { class: "num" }, "observations"), h("th", { class: "num" }, "pending"),
          h("th", { class: "num" }, "held (drift alarms)"), h("th", {}, "last version"),
          h("th", {}, "drift threshold"), h("th", {}, ""))),
        h("tbody", {}, rows))];
}

/** A model: its versions, its batches (for a key that may ingest), its relevance. */
export async function modelPage(name) {
  document.getElementById("where").textContent = name;
  const path = `models/${encodeURIComponent(name)}`;
  const ingest = may("ingest");
  // Everything at once; the posterior as soon as the model says it has one. The relevance is
  // left out, not the page, where the posterior cannot be read (a cache behind the database).
  const modelAsked = api("GET", path);
  const [model, versions, batches, held, posterior] = await Promise.all([
    modelAsked,
    api("GET", `${path}/versions`),
    ingest ? api("GET", `${path}/batches?limit=1000`) : Promise.resolve(null),
    ingest ? api("GET", `${path}/batches?status=held&limit=1000`) : Promise.resolve(null),
    modelAsked.then((m) => (m.version > 0 ? api("GET", `${path}/posterior`) : null))
      .catch((error) => ({ unavailable: error.message })),
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
  if (batches) sections.push(batchesSection(model, batches.batches, held.batches));
  if (posterior && posterior.unavailable) {
    sections.push(h("p", { class: "quiet" }, `The relevance cannot be shown now: ${posterior.unavailable}`));
  } else if (posterior) {
    sections.push(relevanceSection(model, posterior));
  }
  if (model.spectrum && model.transform !== "none" && may("predict")) {
    sections.push(h("p", {}, h("a", { href: `#/match/${encodeURIComponent(model.name)}` },
      "Match a target with this model →")));
  }
  return sections;
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

/** The recent `batches`' surprise, and every `held` batch (drift alarms) for review. */
function batchesSection(model, batches, held) {
  const chronological = [...batches].reverse();
  const worst = (b) => (b.surprise ? Math.max(...b.surprise.filter((z) => z !== null)) : NaN);
  const byStatus = ["folded", "held", "rejected"].map((status, i) => ({
    name: status,
    colour: ["#1f5fa8", "#b3261e", "#5b6677"][i],
    dots: true,
    points: chronological.map((b, k) => [k + 1, b.status === status ? worst(b) : NaN]),
  })).filter((one) => one.points.some(([, y]) => Number.isFinite(y) && y > 0));
  const admin = may("admin");
  const rule = model.drift_threshold === null ? null : { y: model.drift_threshold, label: "threshold" };
  return h("section", { id: "batches-section" },
    h("h2", {}, "Batches: how surprising each was"),
    h("p", { class: "quiet" }, "Per batch, its largest surprise over the outputs (about 1 when the batch agrees " +
      "with the model), oldest first; a batch above the threshold is held for review."),
    chart({ series: byStatus, width: 1000, xLabel: `batch (the last ${batches.length})`,
      yLabel: "surprise (log)", log: true, rule, id: "chart-surprise" }),
    legend(byStatus),
    admin ? thresholdForm(model) : null,
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

/** The admin's control of the drift threshold: a new one judges the batches folded from then on
 * (held batches stay held); the service checks the value and names what is wrong with it. */
function thresholdForm(model) {
  const path = `models/${encodeURIComponent(model.name)}`;
  const input = h("input", { name: "threshold", type: "number", step: "any", required: true,
    "aria-label": "drift threshold", value: model.drift_threshold === null ? "" : model.drift_threshold });
  const form = h("form", { id: "threshold-form" },
    h("label", {}, "drift threshold ", input), " ",
    h("button", { type: "submit", class: "secondary" }, "set"), " ",
    model.drift_threshold === null ? null : h("button", { type: "button", id: "threshold-off", class: "secondary",
      onclick: () => act(`Turn drift alarms off for ${model.name}? No batch will be held for review.`,
        "PATCH", path, { drift_threshold: null }) }, "turn off"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    // A number JSON cannot carry (it would go as null, turning alarms off) goes as typed, for
    // the service to refuse.
    const value = Number(input.value);
    act(null, "PATCH", path, { drift_threshold: Number.isFinite(value) ? value : input.value });
  });
  return form;
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
