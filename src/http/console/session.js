// The console's session: the key (this tab's session storage only), what it may do, and the
// API it asks, relative to where the console is mounted.

import { h } from "./dom.js";

const API = new URL("../v1/", location.href);
export const KEY_ITEM = "mordant.console.key";

/** The key's name and scopes (from GET /v1/keys/self), and what the entry point hooks in: the
 * sign-in form and showing the current page again. */
export const session = { caller: null, signIn: null, render: null };

export class ApiError extends Error {
  constructor(status, body) {
    const message = body && body.error ? body.error.message : `HTTP ${status}`;
    super(message);
    this.status = status;
    this.body = body;
  }
}

export async function api(method, path, body) {
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
export function may(...scopes) {
  return session.caller !== null && session.caller.scopes.some((s) => s === "admin" || scopes.includes(s));
}

/** What a page shows for a failed call: the key form again when the key was refused (401),
 * else the error's message. */
export function failure(error) {
  if (error instanceof ApiError && error.status === 401) {
    sessionStorage.removeItem(KEY_ITEM);
    session.caller = null;
    return session.signIn(`The service did not accept the key: ${error.message}`);
  }
  const details = error instanceof ApiError && error.body && error.body.error && error.body.error.details;
  return h("div", { class: "error", role: "alert" }, h("p", {}, error.message),
    Array.isArray(details) && details.length ?
      h("ul", {}, details.map((d) => h("li", {}, d.path ? `${d.path}: ${d.message}` : d.message))) : null);
}

/** Confirms (when `question` is given), calls the API (with `body`, when given), then shows the
 * page again. */
export async function act(question, method, path, body) {
  if (question && !window.confirm(question)) return;
  try {
    await api(method, path, body);
    await session.render();
  } catch (error) {
    document.getElementById("main").prepend(failure(error));
  }
}
