// accordion ui: draw /api/state, and again whenever /events says the view changed.
// The Gantt figure is embedded from /api/gantt once per layout (its "key"); later
// views only replace its data, so the reader's zoom stays where it was.
"use strict";

let ganttKey = null;
let ganttDoc = null;
let busy = false;
let again = false;

function fmt(x, digits = 1) {
  if (x === null || x === undefined) return "—";
  return x.toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function cell(row, text, numeric = false) {
  const td = document.createElement("td");
  td.textContent = text;
  if (numeric) td.className = "num";
  row.appendChild(td);
}

function fill(id, rows, columns, emptyText) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren();
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = body.parentElement.querySelectorAll("th").length;
    td.className = "empty";
    td.textContent = emptyText;
    tr.appendChild(td);
    body.appendChild(tr);
    return;
  }
  for (const item of rows) {
    const tr = document.createElement("tr");
    if (item.id !== undefined) tr.dataset.job = item.id;
    for (const [get, numeric] of columns) cell(tr, get(item), numeric);
    body.appendChild(tr);
  }
}

function relative(at, now) {
  if (at === null || at === undefined) return "—";
  const d = at - now;
  return `${fmt(at)} (${d >= 0 ? "in " + fmt(d) : fmt(-d) + " ago"} s)`;
}

function drawTables(s) {
  const who = s.identity ? `as ${s.identity}` : "without a login";
  document.getElementById("banner").textContent =
    `now t=${fmt(s.now)} cluster seconds · ${s.machines.length} machines · ` +
    `${s.running.length} running · ${s.queue.length} queued · ${who} · view ${s.version}`;
  const notes = [];
  if (s.error) notes.push(`not up to date: ${s.error}`);
  if (s.unconfirmed) notes.push(`${s.unconfirmed} job events dropped: not in the scheduler's history`);
  document.getElementById("error").textContent = notes.join(" · ");
  fill("machines", s.machines, [
    [m => m.id], [m => m.cpus, true], [m => m.free, true], [m => fmt(m.speed, 2), true],
    [m => (m.online ? "yes" : "no")],
  ], "no machine has registered");
  fill("running", s.running, [
    [j => j.id], [j => j.user], [j => j.procs, true], [j => j.cpus, true],
    [j => fmt(j.mpl, 2), true], [j => j.parts], [j => fmt(j.start), true],
    [j => relative(j.est_end, s.now), true],
  ], "nothing runs");
  fill("queue", s.queue, [
    [j => j.id], [j => j.user], [j => j.state], [j => j.procs, true], [j => fmt(j.submit), true],
    [j => fmt(j.walltime, 0), true], [j => relative(j.predicted_start, s.now), true],
    [j => j.reason || "—"],
  ], "the queue is empty");
  document.body.dataset.version = String(s.version);
}

async function embedGantt() {
  const answer = await (await fetch("api/gantt")).json();
  const div = document.getElementById("gantt");
  div.replaceChildren();
  await Bokeh.embed.embed_item(answer.item, "gantt");
  ganttDoc = Bokeh.documents[Bokeh.documents.length - 1];
  ganttKey = answer.key;
}

function updateGantt(g) {
  const run = ganttDoc.get_model_by_name("run");
  const planned = ganttDoc.get_model_by_name("planned");
  const now = ganttDoc.get_model_by_name("now");
  run.data = g.run;
  planned.data = g.planned;
  if (g.now !== null) {
    now.location = g.now;
    now.visible = true;
  }
  ganttDoc.get_model_by_name("y").end = g.height;
  const fig = ganttDoc.get_model_by_name("gantt");
  fig.title.text = fig.title.text.replace(/: \d+ jobs$/, `: ${g.jobs} jobs`);
}

async function refresh() {
  if (busy) {
    again = true;
    return;
  }
  busy = true;
  try {
    do {
      again = false;
      const s = await (await fetch("api/state")).json();
      if (s.gantt.key !== ganttKey) await embedGantt();
      updateGantt(s.gantt);
      drawTables(s);
    } while (again);
  } catch (err) {
    document.getElementById("error").textContent = `the page could not update: ${err}`;
  } finally {
    busy = false;
  }
}

const stream = new EventSource("events");
stream.onmessage = () => refresh();
stream.onerror = () => {
  document.getElementById("error").textContent = "lost the server; retrying…";
};
refresh();
