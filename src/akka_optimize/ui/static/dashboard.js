// The dashboard's script: every value on a page comes from the service's JSON routes
// (the ones the CLI reads), fetched with the token the login form stored in a cookie.
// Pages of unfinished runs poll those routes. Nothing here changes state except the
// chat box, which posts to the endpoint's chat completions route.
"use strict";

const AK = (() => {
  const COOKIE = "akka_optimize_token";
  const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
  const POLL_MS = 2000;
  const charts = {};

  function token() {
    const hit = document.cookie.split("; ").find((c) => c.startsWith(COOKIE + "="));
    return hit ? decodeURIComponent(hit.slice(COOKIE.length + 1)) : "";
  }

  // GET (or POST with `body`) a JSON route; an error answer throws its own sentence.
  async function api(path, body) {
    const init = { headers: { Authorization: "Bearer " + token() } };
    if (body !== undefined) {
      init.method = "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    const data = await resp.json().catch(() => null);
    if (resp.status === 401) {
      location.href = "/ui/login?next=" + encodeURIComponent(location.pathname + location.search);
    }
    if (!resp.ok) {
      const msg = data && data.error ? data.error.message : `${resp.status} from ${path}`;
      const err = new Error(msg);
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  function showError(err) {
    const el = document.getElementById("error");
    el.textContent = err.message || String(err);
    el.hidden = false;
  }

  function clearError() {
    document.getElementById("error").hidden = true;
  }

  // A DOM element: el("a", {href: "/x"}, "text", child, …).
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "class") node.className = v;
      else node.setAttribute(k, v);
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  // Fill table `target` (an id or the element) with a header row and body rows.
  function table(target, head, rows, empty) {
    const t = typeof target === "string" ? document.getElementById(target) : target;
    t.replaceChildren();
    if (!rows.length) {
      t.append(el("caption", { class: "empty" }, empty || "None."));
      return;
    }
    t.append(el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))));
    t.append(el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
  }

  const num = (x, digits = 4) => (x === null || x === undefined ? "—" : Number(x).toPrecision(digits));
  const short = (id) => (id ? id.slice(0, 8) : "—");
  const runLink = (id) => el("a", { href: "/ui/runs/" + id, class: "run-link" }, short(id));
  const bytes = (n) => (n >= 1048576 ? (n / 1048576).toFixed(1) + " MiB" : (n / 1024).toFixed(1) + " KiB");

  // `name:vN@sha256:…` → a link to the registry page of `namespace/name`.
  function modelLink(ref) {
    if (!ref) return "—";
    const name = ref.split("@")[0];
    return el("a", { href: "/ui/registry/models/" + name.split(":")[0] }, name);
  }

  function progress(run) {
    const r = run.results;
    return r.totalSteps ? `${r.step}/${r.totalSteps}` : String(r.step || 0);
  }

  function summary(id, pairs) {
    const dl = document.getElementById(id);
    dl.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  }

  // ---- charts (uPlot) ----------------------------------------------------------------
  function chart(id, series, data) {
    const box = document.getElementById(id);
    const opts = {
      title: box.dataset.title,
      width: Math.max(320, box.clientWidth || 480),
      height: 240,
      scales: { x: { time: false } },
      cursor: { drag: { x: true, y: false } },
      axes: [
        { label: "step", incrs: STEP_INCRS },
        { size: 70, values: (u, vals) => vals.map(tick) },
      ],
      series: [{ label: "step" }, ...series],
    };
    if (charts[id]) {
      charts[id].setData(data);
    } else {
      box.replaceChildren();
      charts[id] = new uPlot(opts, data, box);
    }
    box.dataset.points = String(data[0].length);
    return charts[id];
  }

  // Whole steps only on the x axis; small values (learning rates) as 1.0e-4, not 0.000.
  const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000];
  const tick = (v) => (v === 0 ? "0" : Math.abs(v) < 0.01 || Math.abs(v) >= 1e5 ? v.toExponential(1) : String(+v.toPrecision(4)));

  const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

  // Align per-step series on the union of their steps (uPlot's data layout).
  function aligned(seriesRows) {
    const steps = [...new Set(seriesRows.flatMap((rows) => rows.map((r) => r.step)))];
    steps.sort((a, b) => a - b);
    const cols = seriesRows.map((rows) => {
      const byStep = new Map(rows.map((r) => [r.step, r.value]));
      return steps.map((s) => (byStep.has(s) ? byStep.get(s) : null));
    });
    return [steps, ...cols];
  }

  function pick(rows, key) {
    return rows.filter((r) => r[key] !== null && r[key] !== undefined).map((r) => ({ step: r.step, value: r[key] }));
  }

  function drawRunCharts(m) {
    const line = (label, i, extra) => ({ label, stroke: COLOURS[i], width: 1.5, spanGaps: true, ...extra });
    chart(
      "chart-loss",
      [line("loss", 0), line("validation loss", 1, { points: { show: true, size: 6 } })],
      aligned([pick(m.metrics, "loss"), pick(m.validation, "loss")]),
    );
    chart("chart-lr", [line("learning rate", 2)], aligned([pick(m.metrics, "learningRate")]));
    chart("chart-grad", [line("gradient norm", 3)], aligned([pick(m.metrics, "gradNorm")]));
    chart("chart-ratio", [line("update ratio", 4)], aligned([pick(m.metrics, "updateRatio")]));
    // Reinforcement runs: the mean reward of each update's rollouts, with their range.
    const rewards = pick(m.metrics, "rewardMean");
    const box = document.getElementById("chart-reward");
    if (rewards.length) {
      box.hidden = false;
      chart(
        "chart-reward",
        [line("mean reward", 2), line("min reward", 5, { dash: [4, 4] }), line("max reward", 4, { dash: [4, 4] })],
        aligned([rewards, pick(m.metrics, "rewardMin"), pick(m.metrics, "rewardMax")]),
      );
    }
    // Preference runs: the rewards of each update's pairs and the validation accuracy.
    const accuracy = pick(m.metrics, "rewards/accuracy");
    const prefBox = document.getElementById("chart-preference");
    if (accuracy.length && prefBox) {
      prefBox.hidden = false;
      chart(
        "chart-preference",
        [
          line("accuracy", 2),
          line("margin", 0),
          line("chosen", 4, { dash: [4, 4] }),
          line("rejected", 1, { dash: [4, 4] }),
          line("validation accuracy", 3, { points: { show: true, size: 6 } }),
        ],
        aligned([
          accuracy,
          pick(m.metrics, "rewards/margin"),
          pick(m.metrics, "rewards/chosen"),
          pick(m.metrics, "rewards/rejected"),
          pick(m.validation, "rewards/accuracy"),
        ]),
      );
    }
  }

  // ---- pages -------------------------------------------------------------------------
  function runRow(r) {
    return [
      runLink(r.id),
      el("span", { class: "state state-" + r.state }, r.state),
      progress(r),
      num(r.results.finalLoss),
      num(r.results.validationLoss),
      reward(r),
      modelLink(r.results.model),
    ];
  }

  // A reinforcement run's mean reward at its first and last update ("—" for other runs).
  function reward(run) {
    const r = run.results;
    if (r.rewardStart === null || r.rewardStart === undefined) return "—";
    return `${num(r.rewardStart)} → ${num(r.rewardFinal)}`;
  }

  async function projectsPage(only) {
    const box = document.getElementById("projects");
    try {
      // One project: its own route says so when there is no such project.
      const projects = only
        ? [await api(`/v1/training/projects/${encodeURIComponent(only)}`)]
        : (await api("/v1/training/projects")).projects;
      const sections = await Promise.all(projects.map(projectSection));
      box.replaceChildren(...(sections.length ? sections : [el("p", {}, "No projects yet.")]));
    } catch (err) {
      box.replaceChildren();
      showError(err);
    }
  }

  async function projectSection(project) {
    const name = project.name;
    const q = encodeURIComponent(name);
    // A project without evaluation settings has no scores table (its route answers 409).
    const unset = `No evaluation settings, so no scores; set them with \`training projects set-evaluation ${name} --dataset DATASET --grader GRADER\`.`;
    const [runs, models, eps, evs, scores] = await Promise.all([
      api(`/v1/training/runs?project=${q}`),
      api(`/v1/registry/models?namespace=${q}`),
      api(`/v1/training/endpoints?project=${q}`),
      api(`/v1/training/evaluations?project=${q}`),
      project.evaluation ? api(`/v1/training/projects/${q}/scores`) : { missing: unset },
    ]);
    const sec = el("section", { class: "project", "data-project": name });
    const tables = ["runs", "models", "endpoints", "evaluations", "scores"].map((c) => el("table", { class: c }));
    const [tr, tm, te, tv, ts] = tables;
    sec.append(el("h2", {}, el("a", { href: "/ui/projects/" + q }, name)));
    sec.append(el("h3", {}, "Runs"), tr, el("h3", {}, "Models"), tm, el("h3", {}, "Endpoints"), te);
    sec.append(el("h3", {}, "Evaluations"), tv, el("h3", {}, "Scores"), scoresHint(scores), ts);
    table(tr, ["run", "state", "progress", "final loss", "validation loss", "reward", "model"], runs.runs.map(runRow), "No runs.");
    table(tm, ["model", "versions", "latest", "aliases"], models.items.map(modelRow), "No models.");
    table(te, ["endpoint", "state", "serves"], eps.endpoints.map(endpointRow), "No endpoints.");
    table(tv, ["evaluation", "state", "model", "grader", "mean", "stderr", "scored", "errors"], evs.evaluations.map(evaluationRow), "No evaluations.");
    table(ts, ["base model", "model", "mean", "stderr", "count", "errors", "evaluation"], scores.missing ? [] : scoreRows(scores), scores.missing || "No scored models yet.");
    return sec;
  }

  function evaluationRow(e) {
    const r = e.results || {};
    return [
      el("span", { class: "evaluation-id" }, short(e.id)),
      el("span", { class: "state state-" + e.state }, e.state),
      modelLink(e.model),
      e.grader || "—",
      num(r.mean),
      num(r.stderr),
      r.scored === undefined ? "—" : `${r.scored}/${r.count}`,
      r.errors === undefined ? "—" : r.errors,
    ];
  }

  // What the scores are measured on (the project's evaluation settings), above the table.
  function scoresHint(scores) {
    if (scores.missing) return null;
    return el("p", { class: "hint" }, `on ${scores.dataset} graded by ${scores.grader}`);
  }

  // One row per model: its base-model version on the first row of its group only.
  function scoreRows(scores) {
    return scores.rows.flatMap((row) =>
      row.models.map((m, i) => [i ? "" : row.baseModel, modelLink(m.model), num(m.mean), num(m.stderr), m.count, m.errors, short(m.evaluationId)]),
    );
  }

  function modelRow(m) {
    return [
      el("a", { href: "/ui/registry/models/" + m.name }, m.name),
      m.versions,
      m.latest,
      Object.entries(m.aliases || {}).map(([a, v]) => `${a}→${v}`).join(", ") || "—",
    ];
  }

  function endpointRow(e) {
    return [
      el("a", { href: "/ui/endpoints/" + e.id, class: "endpoint-link" }, short(e.id)),
      el("span", { class: "state state-" + e.state }, e.state),
      (e.models || []).map((m) => m.model).join(", "),
    ];
  }

  // "group: key=value* key=value" (as `runs get --settings` prints) → cells, stated marked.
  function settingsRows(lines) {
    return lines.map((line) => {
      const at = line.indexOf(": ");
      const group = at < 0 ? line : line.slice(0, at);
      const rest = at < 0 ? "" : line.slice(at + 2);
      const pairs = [...rest.matchAll(/(\S+?)=(.*?)(?= [^\s=]+=|$)/g)];
      const cells = pairs.map(([, k, v]) => {
        const stated = v.endsWith("*");
        const value = stated ? v.slice(0, -1) : v;
        return el("span", { class: stated ? "setting stated" : "setting", "data-key": `${group}.${k}` }, `${k}=${value}`, stated ? "*" : null);
      });
      return [group, el("span", { class: "settings" }, cells)];
    });
  }

  async function runPage(prefix) {
    let run;
    try {
      run = await api(`/v1/training/runs/${encodeURIComponent(prefix)}?settings=true`);
    } catch (err) {
      document.getElementById("run").hidden = true;
      showError(err);
      return;
    }
    document.getElementById("run-id").textContent = run.id;
    document.getElementById("compare-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const others = document.getElementById("compare-with").value.split(",").map((s) => s.trim()).filter(Boolean);
      location.href = "/ui/compare?runs=" + encodeURIComponent([run.id, ...others].join(","));
    });
    const settings = run.settings || {};
    const lines = settings.settingsText || [];
    table("settings", ["group", "settings"], settingsRows(lines), "This run recorded no settings text.");
    await refreshRun(run);
  }

  async function refreshRun(run) {
    try {
      const id = run.id;
      const [m, snaps, tree, anc] = await Promise.all([
        api(`/v1/training/runs/${id}/metrics`),
        api(`/v1/training/runs/${id}/snapshots`),
        api(`/v1/training/runs/${id}/tree`),
        api(`/v1/training/runs/${id}/ancestry`),
      ]);
      runSummary(run);
      drawRunCharts(m);
      table(
        "snapshots",
        ["name", "step", "epoch", "resumable", "adapter", "state size", "adapter size", "model"],
        snaps.snapshots.map((s) => [s.name, s.step, s.epoch, s.recoverable ? "yes" : "no", s.hasAdapter ? "yes" : "no", bytes(s.bytes.state), bytes(s.bytes.adapter), modelLink(s.model)]),
        "No snapshots.",
      );
      lineage(run, tree, anc);
      clearError();
      if (!TERMINAL.has(run.state)) {
        setTimeout(async () => refreshRun(await api(`/v1/training/runs/${id}?settings=true`)), POLL_MS);
      }
    } catch (err) {
      showError(err);
    }
  }

  function runSummary(run) {
    const fail = document.getElementById("failure");
    fail.hidden = !run.failure;
    fail.textContent = run.failure || "";
    summary("summary", [
      ["project", el("a", { href: "/ui/projects/" + run.project }, run.project)],
      ["state", el("span", { class: "state state-" + run.state, id: "run-state" }, run.state + (run.phase ? ` (${run.phase})` : ""))],
      ["progress", progress(run)],
      ["final loss", num(run.results.finalLoss)],
      ["validation loss", num(run.results.validationLoss)],
      ...(run.method === "rl" ? [["reward", el("span", { id: "run-reward" }, reward(run))], ["reward grader", run.reward || "—"]] : []),
      ["model", modelLink(run.results.model)],
      ["base model", run.baseModel],
      ["dataset", run.dataset],
      ["configuration hash", run.configHash.slice(0, 12)],
      ["wall time", `${run.cost.wallSeconds} s on ${run.cost.device}`],
    ]);
  }

  function treeList(node) {
    const item = el("li", {}, runLink(node.run), ` ${node.state}`, node.snapshot ? ` from ${node.snapshot}` : "");
    if (node.branches && node.branches.length) item.append(el("ul", {}, node.branches.map(treeList)));
    return item;
  }

  function lineage(run, tree, anc) {
    const box = document.getElementById("lineage");
    const parts = [];
    if (anc.ancestry.length > 1) {
      // The API lists this run first; shown root first, each arrow naming the snapshot.
      const chain = anc.ancestry.slice().reverse();
      parts.push(el("p", { id: "ancestry" }, "Ancestry: ", chain.map((a, i) => [i ? ` → (${a.snapshot || "start"}) ` : "", runLink(a.run)])));
    }
    if (run.warmStartModelId) parts.push(el("p", {}, "Warm start from ", modelLink(run.warmStartModelId)));
    parts.push(el("p", {}, "Branches of this run:"));
    parts.push(tree.branches.length ? el("ul", { id: "branches" }, tree.branches.map(treeList)) : el("p", { class: "empty" }, "None."));
    box.replaceChildren(...parts);
  }

  async function comparePage(ids) {
    if (ids.length < 2) {
      showError(new Error("Name two or more runs to compare: /ui/compare?runs=RUN1,RUN2."));
      return;
    }
    try {
      const runs = await Promise.all(ids.map((id) => api(`/v1/training/runs/${encodeURIComponent(id)}`)));
      const ms = await Promise.all(runs.map((r) => api(`/v1/training/runs/${r.id}/metrics`)));
      chart(
        "chart-overlay",
        runs.map((r, i) => ({ label: short(r.id), stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: true })),
        aligned(ms.map((m) => pick(m.metrics, "loss"))),
      );
      table("compare-runs", ["run", "state", "progress", "final loss", "validation loss", "reward", "model"], runs.map(runRow));
    } catch (err) {
      showError(err);
    }
  }

  async function registryPage() {
    try {
      const [ds, models] = await Promise.all([api("/v1/registry/datasets"), api("/v1/registry/models")]);
      table(
        "datasets",
        ["dataset", "versions", "latest", "aliases"],
        ds.items.map((d) => [el("a", { href: "/ui/registry/datasets/" + d.name }, d.name), d.versions, d.latest, Object.entries(d.aliases || {}).map(([a, v]) => `${a}→${v}`).join(", ") || "—"]),
        "No datasets.",
      );
      table("models", ["model", "versions", "latest", "aliases"], models.items.map(modelRow), "No models.");
    } catch (err) {
      showError(err);
    }
  }

  async function entryPage(kinds, ref) {
    try {
      const v = await api(`/v1/registry/${kinds}/${ref}/versions`);
      if (kinds === "models") {
        table(
          "versions",
          ["version", "aliases", "source", "run", "base model", "parent model", "final loss", "size"],
          v.items.map((x) => [x.version, x.aliases.join(", ") || "—", x.source, x.runId ? runLink(x.runId) : "—", x.baseModel ? modelLink(x.baseModel) : "—", x.parentModel ? modelLink(x.parentModel) : "—", num(x.metadata.finalLoss), bytes(x.size)]),
        );
      } else {
        table("versions", ["version", "aliases", "rows", "digest", "size"], v.items.map((x) => [x.version, x.aliases.join(", ") || "—", x.metadata.rows, x.digest.slice(0, 19), bytes(x.size)]));
        await previewForm(ref);
      }
    } catch (err) {
      showError(err);
    }
  }

  async function previewForm(ref) {
    const select = document.getElementById("preview-base");
    const bases = (await api("/v1/training/base-models")).baseModels.filter((b) => b.state === "READY");
    for (const b of bases) select.append(el("option", { value: b.repository }, b.repository));
    const run = async () => {
      try {
        const out = await api("/v1/training/data/preview", { dataset: ref, baseModel: select.value, rowCount: 3 });
        document.getElementById("preview").replaceChildren(...out.rows.map(previewRow));
        clearError();
      } catch (err) {
        showError(err);
      }
    };
    document.getElementById("preview-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      run();
    });
    if (bases.length) await run();
  }

  function previewRow(r) {
    const head = el("h3", {}, `row ${r.row}`);
    if (r.error) return el("div", { class: "preview-row" }, head, el("p", { class: "error" }, r.error));
    const text = el("pre", { class: "rendered" }, r.segments.map((s) => el("span", { class: s.supervised ? "supervised" : "context" }, s.text)));
    const info = el("p", { class: "hint" }, `${r.supervised_tokens} of ${r.tokens} tokens supervised`);
    return el("div", { class: "preview-row", "data-row": r.row }, head, info, text);
  }

  async function endpointsPage() {
    try {
      const eps = await api("/v1/training/endpoints");
      table("endpoints", ["endpoint", "state", "serves"], eps.endpoints.map(endpointRow), "No endpoints.");
    } catch (err) {
      showError(err);
    }
  }

  async function endpointPage(id) {
    let ep;
    try {
      ep = await api(`/v1/training/endpoints/${encodeURIComponent(id)}`);
    } catch (err) {
      document.getElementById("endpoint").hidden = true;
      showError(err);
      return;
    }
    summary("summary", [
      ["id", ep.id],
      ["project", ep.projectName || "—"],
      ["state", el("span", { class: "state state-" + ep.state, id: "endpoint-state" }, ep.state)],
    ]);
    table("served", ["model"], (ep.models || []).map((m) => [modelLink(m.model)]), "Nothing yet.");
    const select = document.getElementById("chat-model");
    for (const m of ep.models || []) select.append(el("option", { value: m.model }, m.model));
    document.getElementById("chat-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      chat(ep.id);
    });
  }

  async function chat(id) {
    const input = document.getElementById("chat-input");
    const log = document.getElementById("chat-log");
    const text = input.value.trim();
    if (!text) return;
    log.append(el("p", { class: "chat-user" }, text));
    const button = document.getElementById("chat-send");
    button.disabled = true;
    try {
      const body = {
        model: document.getElementById("chat-model").value,
        messages: [{ role: "user", content: text }],
        max_tokens: 64,
        temperature: 0,
      };
      const out = await api(`/v1/training/endpoints/${id}/openai/v1/chat/completions`, body);
      const answer = out.choices[0].message.content || "";
      log.append(el("p", { class: "chat-answer" }, answer));
      if (!answer.trim()) log.append(el("p", { class: "hint chat-blank" }, `(the answer is ${answer.length} whitespace characters)`));
      input.value = "";
      clearError();
    } catch (err) {
      showError(err);
    } finally {
      button.disabled = false;
    }
  }

  return { api, charts, projectsPage, runPage, comparePage, registryPage, entryPage, endpointsPage, endpointPage };
})();
