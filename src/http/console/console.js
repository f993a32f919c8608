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
    show(keyForm());
  } }, "Forget key");
  who.replaceChildren(`${name} · ${caller.scopes.join(", ")} `, caller.enforced ? forget : "");
}

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
    session.caller = await api("GET", "keys/self");
  } catch (error) {
    const stored = sessionStorage.getItem(KEY_ITEM);
    sessionStorage.removeItem(KEY_ITEM);
    session.caller = null;
    whoLine();
    show(keyForm(stored ? `The service did not accept the key: ${error.message}` : error.message));
    return;
  }
  if (session.caller.scopes.length === 0) {
    // Keys are enforced and none was given.
    session.caller = null;
    whoLine();
    show(keyForm());
    return;
  }
  whoLine();
  await render();
}

session.signIn = keyForm;
session.render = render;
window.addEventListener("hashchange", render);
start();
