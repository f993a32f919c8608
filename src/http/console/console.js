// The lab console: a page of the service that reads and acts through its public API only,
// with the key its user gives (kept in this tab's session storage, never anywhere else).
// No framework and no build step: the browser runs these modules as the service serves them.
// This one is the entry point: the key, the header line, and which page the address names.

import { h, show } from "./dom.js";
import { matchPage } from "./kitchen.js";
import { modelPage, modelsPage } from "./models.js";
import { KEY_ITEM, api, failure, session } from "./session.js";

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
  if (!session.caller) {
    who.replaceChildren();
    return;
  }
  const { caller } = session;
  const name = caller.enforced ? caller.name : "keys not enforced";
  const forget = h("button", { class: "secondary", id: "forget-key", onclick: () => {
    sessionStorage.removeItem(KEY_ITEM);
    session.caller = null;
    // The next key starts from the list of models (without showing a page now).
    history.replaceState(null, "", "#/");
    whoLine();
    showNow(keyForm());
  } }, "Forget key");
  who.replaceChildren(`${name} · ${caller.scopes.join(", ")} `, caller.enforced ? forget : "");
}

// Each page shown takes the next generation; a page still loading for an older one (the key
// was forgotten, or the address changed meanwhile) is then dropped.
let generation = 0;

function showNow(...nodes) {
  generation += 1;
  show(...nodes);
}

async function render() {
  generation += 1;
  const mine = generation;
  let nodes;
  try {
    const route = location.hash.replace(/^#/, "") || "/";
    const [, page, name] = route.split("/").map(decodeURIComponent);
    if (page === "models" && name) nodes = await modelPage(name);
    else if (page === "match" && name) nodes = await matchPage(name);
    else nodes = await modelsPage();
  } catch (error) {
    nodes = [failure(error)];
  }
  if (mine !== generation) return;
  show(nodes);
  // For the benchmark (bench/console): when the page's content was on screen.
  performance.mark("console:rendered");
}

async function start() {
  try {
    session.caller = await api("GET", "keys/self");
  } catch (error) {
    const stored = sessionStorage.getItem(KEY_ITEM);
    // Only a refused key is forgotten: the service may just be unreachable for a moment.
    if (error.status === 401) sessionStorage.removeItem(KEY_ITEM);
    session.caller = null;
    whoLine();
    showNow(keyForm(stored && error.status === 401 ?
      `The service did not accept the key: ${error.message}` : error.message));
    return;
  }
  if (session.caller.scopes.length === 0) {
    // Keys are enforced and none was given.
    session.caller = null;
    whoLine();
    showNow(keyForm());
    return;
  }
  whoLine();
  await render();
}

session.signIn = (problem) => {
  whoLine();
  return keyForm(problem);
};
session.render = render;
window.addEventListener("hashchange", render);
start();
