// DOM helpers of the lab console: elements built from data (text is never parsed as markup)
// and numbers and times as the pages show them.

/** An HTML element; text children are text nodes, never markup. */
export function h(tag, attrs = {}, ...children) {
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
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function show(...children) {
  const main = document.getElementById("main");
  main.replaceChildren(...children.flat());
}

export function fmt(value, digits = 4) {
  if (value === null || value === undefined) return "—";
  if (typeof value !== "number") return String(value);
  if (value !== 0 && (Math.abs(value) < 1e-3 || Math.abs(value) >= 1e5)) return value.toExponential(2);
  return Number(value.toPrecision(digits)).toString();
}

export function when(stamp) {
  if (!stamp) return "—";
  const date = new Date(stamp);
  return date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}
