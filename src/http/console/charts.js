// Charts of the lab console as SVG, drawn from the data alone.

import { fmt, h, s } from "./dom.js";

/** Colours of the outputs' series, in order. */
export const PALETTE = ["#1f5fa8", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207",
  "#be185d", "#4d7c0f", "#1e3a8a"];

/**
 * A line (or dot) chart of `series` ([{name, colour, points: [[x, y]], dots}]) with an optional
 * horizontal `rule` ({y, label}); `log` plots y on a log scale.
 */
export function chart({ series, width = 540, height = 220, xLabel = "", yLabel = "", log = false, rule = null,
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
  // Loops, not Math.min(...points): a long history would pass the engine's argument limit.
  const range = (values) => values.reduce(([lo, hi], v) => [Math.min(lo, v), Math.max(hi, v)],
    [Infinity, -Infinity]);
  let [x0, x1] = range(points.map((p) => p[0]));
  let [y0, y1] = range(points.map((p) => ty(p[1])).concat(rule ? [ty(rule.y)] : []));
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

export function legend(series) {
  return h("div", { class: "legend" },
    series.map((one) => h("span", {}, h("i", { colour: one.colour }), one.name)));
}
