// The gallery's page logic: window.GALLERY (data.js) rendered per tab; every filter lives in the URL fragment, so a
// link reopens the same slice. Only the current page's cards exist in the DOM, and their images load lazily.
"use strict";

const DATA = window.GALLERY;
const PAGE_SIZE = 48;
const $ = (selector) => document.querySelector(selector);
const form = $("#filters");
// The judge's questions (P(Yes) of each on a card): short label and what it asks.
const JUDGE_QUESTIONS = {
  original_o: ["orig@I_o", "does I_o show C_o's word?"], substitute_c: ["sub@I_c", "does I_c show C_c's word?"],
  substitute_o: ["sub@I_o", "does I_o show the substitute?"], original_c: ["orig@I_c", "does I_c show the original?"],
};

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

// URL fragment <-> state: tab, page and every named form control. A tab the page lacks is the default tab; a page
// that is not a number is page 1.
const TABS = [...document.querySelectorAll("#tabs a")].map((link) => link.dataset.tab);
function readState() {
  const state = Object.fromEntries(new URLSearchParams(location.hash.slice(1)));
  state.tab = TABS.includes(state.tab) ? state.tab : DATA.tab || "overview";
  state.page = Math.max(1, parseInt(state.page, 10) || 1);
  return state;
}

function writeState(state) {
  const kept = Object.entries(state).filter(([key, value]) => value !== "" && !(key === "page" && value === 1));
  history.replaceState(null, "", "#" + new URLSearchParams(kept).toString());
}

function formState() {
  const state = {};
  for (const control of form.elements) {
    if (!control.name) continue;
    state[control.name] = control.type === "checkbox" ? (control.checked ? "1" : "") : control.value;
  }
  return state;
}

function fillForm(state) {
  for (const control of form.elements) {
    if (!control.name) continue;
    if (control.type === "checkbox") control.checked = state[control.name] === "1";
    else control.value = state[control.name] || "";
  }
}

function setUpControls() {
  if (DATA.title) document.title = $("h1").textContent = DATA.title;
  $("#notice").textContent = DATA.notice || "";
  $("#notice").hidden = !DATA.notice;
  const empty = { overview: !Object.keys(DATA.funnel).length && !DATA.figures.length, rejects: !DATA.rejects.length,
    removal: !DATA.removal.length };
  for (const link of document.querySelectorAll("#tabs a")) link.hidden = Boolean(empty[link.dataset.tab]);
  const types = [...new Set(DATA.pairs.map((p) => p.edit_type))].sort();
  for (const type of types) form.edit_type.append(el("option", {}, type));
  const changes = [...new Set(DATA.pairs.map((p) => p.change).filter(Boolean))].sort();
  for (const change of changes) form.change.append(el("option", {}, change));
  $("#change-filter").hidden = !changes.length;
  const judged = DATA.pairs.some((p) => p.judge);
  for (const label of document.querySelectorAll(".judge-filter")) label.hidden = !judged;
  form.sort.append(el("option", { value: "" }, "caption id"));
  for (const score of DATA.scores) {
    form.sort.append(el("option", {}, score));
    $("#ranges").append(el("label", {}, score + " ",
      el("input", { name: "min." + score, type: "number", step: "any", placeholder: "min" }), " – ",
      el("input", { name: "max." + score, type: "number", step: "any", placeholder: "max" })));
  }
}

function matches(pair, state) {
  if (state.edit_type && pair.edit_type !== state.edit_type) return false;
  if (state.change && pair.change !== state.change) return false;
  if (state.word) {
    const word = state.word.toLowerCase();
    if (!pair.original_word.toLowerCase().includes(word) && !pair.substitute.toLowerCase().includes(word)) return false;
  }
  if (state.validation) {
    const verdict = pair.validation === null ? "none" : pair.validation;
    if (verdict !== state.validation) return false;
  }
  if (state.judge && judgeVerdict(pair) !== state.judge) return false;
  if (state.agreement && pair.agreement !== state.agreement) return false;
  for (const score of DATA.scores) {
    const low = state["min." + score], high = state["max." + score], value = pair[score];
    if ((low || high) && (value === null || value === undefined)) return false;
    if (low && value < parseFloat(low)) return false;
    if (high && value > parseFloat(high)) return false;
  }
  return true;
}

function sorted(pairs, state) {
  if (!state.sort) return state.desc ? [...pairs].reverse() : pairs;
  const key = state.sort, sign = state.desc ? -1 : 1;
  return [...pairs].sort((a, b) => {
    const x = a[key], y = b[key];
    if (x === y) return a.caption_id < b.caption_id ? -1 : a.caption_id > b.caption_id ? 1 : 0;
    if (x === null) return 1;
    if (y === null) return -1;
    return sign * (x < y ? -1 : 1);
  });
}

function highlighted(text, spans, kind) {  // spans: sorted, disjoint [start, end) (a swap has two)
  const parts = [];
  let at = 0;
  for (const [start, end] of spans) {
    parts.push(text.slice(at, start), el("mark", { class: kind }, text.slice(start, end)));
    at = end;
  }
  return el("span", {}, ...parts, text.slice(at));
}

function figure(image, label) {
  const img = el("img", { src: image.thumb, loading: "lazy", alt: label, "data-full": image.full });
  return el("figure", {}, img, el("figcaption", {}, label));
}

function format(value) {
  return value === null || value === undefined ? "–" : Number.isInteger(value) ? String(value) : value.toFixed(4);
}

// "pass", "reject" or "none" (not judged): what the judge filter matches.
function judgeVerdict(pair) {
  return pair.judge ? (pair.judge.pass ? "pass" : "reject") : "none";
}

function judgeLine(judge) {
  if (!judge) return null;
  const verdict = judge.pass ? "pass" : (judge.reason || "reject").replace(/^judge_/, "").replaceAll("_", " ");
  const answers = Object.entries(JUDGE_QUESTIONS).map(([question, [label, asks]]) =>
    el("span", { title: asks }, ` ${label} ${format(judge.p_yes[question])}`));
  return el("p", { class: "judge" },
    el("span", { class: "verdict " + (judge.pass ? "judge-pass" : "judge-reject") }, "judge: " + verdict),
    " P(yes):", ...answers);
}

// The toy world's checker on this pair: a counterfactual (I_o shows C_o and not C_c, I_c shows C_c and not C_o), and
// minimal or not; the tooltip says what each image shows and why one fails its caption.
function truthBadge(truth) {
  if (!truth) return null;
  const label = truth.accurate ? (truth.minimal ? "truth: counterfactual, minimal" : "truth: counterfactual, not minimal")
    : "truth: not a counterfactual";
  const shows = (image, own, other, reason, mine, theirs) =>
    `${image}: ${own ? `shows ${mine}` : `does not show ${mine} (${reason})`}${other ? `, also shows ${theirs}` : ""}`;
  const title = [shows("I_o", truth.o_shows_o, truth.o_shows_c, truth.reason_o, "C_o", "C_c"),
    shows("I_c", truth.c_shows_c, truth.c_shows_o, truth.reason_c, "C_c", "C_o")].join("\n");
  return el("span", { class: "verdict " + (truth.accurate ? "truth-pass" : "truth-fail"), title }, label);
}

function pairCard(pair) {
  const scores = el("table", {}, ...DATA.scores.map((s) => el("tr", {}, el("td", {}, s), el("td", {}, format(pair[s])))));
  const verdict = pair.validation === null ? null :
    el("span", { class: "verdict " + pair.validation.replace(" ", "-") }, pair.validation);
  const version = pair.label ? el("p", { class: "version" }, `${pair.label} · ${pair.change}`) : null;
  return el("article", { class: "card", "data-caption-id": pair.caption_id, "data-edit-type": pair.edit_type,
    "data-judge": judgeVerdict(pair), "data-agreement": pair.agreement || "" },
    version, el("div", { class: "images" }, figure(pair.image_o, "I_o"), figure(pair.image_c, "I_c")),
    el("p", {}, el("b", {}, "C_o "), highlighted(pair.caption, pair.spans_o, "o")),
    el("p", {}, el("b", {}, "C_c "), highlighted(pair.counterfactual, pair.spans_c, "c")),
    el("p", { class: "edit" }, `${pair.edit_type}: ${pair.original_word || "∅"} → ${pair.substitute || "∅"} `, verdict,
      " ", truthBadge(pair.truth)),
    judgeLine(pair.judge), scores);
}

function renderPairs(state) {
  const shown = sorted(DATA.pairs.filter((p) => matches(p, state)), state);
  const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
  const page = Math.min(state.page, pages);
  $("#count").textContent = `${shown.length} of ${DATA.pairs.length} pairs`;
  $("#cards").replaceChildren(...shown.slice((page - 1) * PAGE_SIZE, page * PAGE_SIZE).map(pairCard));
  $("#page").textContent = `page ${page} of ${pages}`;
  $("#prev").disabled = page <= 1;
  $("#next").disabled = page >= pages;
}

function renderOverview() {
  $("#funnel").replaceChildren(...Object.entries(DATA.funnel).map(([step, n]) =>
    el("tr", {}, el("td", {}, step.replaceAll("_", " ")), el("td", {}, String(n)))));
  $("#figures").replaceChildren(...DATA.figures.map((src) => el("img", { src, alt: src, loading: "lazy" })));
}

function cell(value) {
  return typeof value === "number" ? format(value) : value === null || value === undefined ? "–" : String(value);
}

function renderRejects() {
  $("#reject-groups").replaceChildren(...DATA.rejects.map((group) => {
    const columns = group.rows.length ? Object.keys(group.rows[0]) : [];
    return el("details", { class: "reject-group", "data-stage": group.stage, "data-reason": group.reason,
      "data-count": String(group.count) },
      el("summary", {}, `${group.stage} · ${group.reason}: ${group.count}`),
      el("table", { class: "rejects" }, el("tr", {}, ...columns.map((c) => el("th", {}, c))),
        ...group.rows.map((row) => el("tr", {}, ...columns.map((c) => el("td", {}, cell(row[c])))))));
  }));
}

function renderRemoval() {
  $("#removal-cards").replaceChildren(...DATA.removal.map((pair) =>
    el("article", { class: "card removal" },
      el("div", { class: "images" }, figure(pair.image_0, "I_0"), figure(pair.image_1, "I_1")),
      el("p", {}, el("b", {}, "C_0 "), highlighted(pair.caption, pair.spans_0, "o")),
      el("p", {}, el("b", {}, "C_1 "), pair.edited_caption),
      el("p", { class: "edit" }, `removed: ${pair.removed.join(", ")} · ${pair.split} · clip drop ${format(pair.clip_drop)}`))));
}

const rendered = {};
function render() {
  const state = readState();
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.id === state.tab);
  for (const link of document.querySelectorAll("#tabs a")) link.classList.toggle("active", link.dataset.tab === state.tab);
  fillForm(state);
  if (state.tab === "pairs") renderPairs(state);
  else if (!rendered[state.tab]) {
    ({ overview: renderOverview, rejects: renderRejects, removal: renderRemoval })[state.tab]();
    rendered[state.tab] = true;
  }
}

function update(changes) {
  writeState({ ...readState(), ...formState(), ...changes });
  render();
}

setUpControls();
form.addEventListener("input", () => update({ page: 1 }));
form.addEventListener("submit", (event) => event.preventDefault());
$("#prev").addEventListener("click", () => update({ page: readState().page - 1 }));
$("#next").addEventListener("click", () => update({ page: readState().page + 1 }));
for (const link of document.querySelectorAll("#tabs a")) link.addEventListener("click", () => update({ tab: link.dataset.tab, page: 1 }));
document.addEventListener("click", (event) => {
  const full = event.target.dataset && event.target.dataset.full;
  if (full) {
    $("#viewer img").src = full;
    $("#viewer").hidden = false;
  } else if (event.target.closest("#viewer")) $("#viewer").hidden = true;
});
window.addEventListener("hashchange", render);
render();
performance.mark("gallery-rendered");  // the first render is done: what benchmarks/gallery_scale.py times
