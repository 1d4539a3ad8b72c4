// The Troupe dashboard: a single page over the head's JSON APIs (docs/dashboard.md). No build
// step and no libraries: plain DOM and hand-drawn SVG charts. Every page re-renders from a poll
// every POLL_MS; all text from the cluster goes in through text nodes (never innerHTML).
'use strict';

const POLL_MS = 1500;
const TASK_SAMPLES = 240;  // the Tasks page keeps ~6 minutes of counter samples
const COLORS = ['#2f6fdf', '#1f8a4c', '#c62f2f', '#b7791f', '#7b3fc4', '#138a8a'];

// ---- DOM helpers ----

// h('div', {class: 'x', onclick: f}, 'text', child, [children]) -> element.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else el.setAttribute(key, value === true ? '' : value);
  }
  appendAll(el, children);
  return el;
}

function appendAll(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

const SVG_NS = 'http://www.w3.org/2000/svg';
function s(tag, attrs, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, value);
  if (text !== undefined) el.textContent = text;
  return el;
}

function table(headers, rows, emptyText) {
  return h('div', {class: 'table-wrap'},
    h('table', {},
      h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
      h('tbody', {}, rows.length ? rows :
        h('tr', {}, h('td', {colspan: headers.length, class: 'muted'}, emptyText || 'none')))));
}

function badge(state) { return h('span', {class: 'badge ' + state}, state); }
function short(id) { return id ? id.slice(0, 8) : '—'; }
function card(label, value, sub) {
  return h('div', {class: 'card'}, h('div', {class: 'label'}, label),
    h('div', {class: 'value'}, value), sub ? h('div', {class: 'sub'}, sub) : null);
}

function formatBytes(n) {
  if (!(n > 0)) return '0 B';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
  return (n >= 100 || i === 0 ? n.toFixed(0) : n.toFixed(1)) + ' ' + units[i];
}
function formatAmount(key, n) {
  if (/memory/i.test(key)) return formatBytes(n);
  return Number.isInteger(n) ? String(n) : n.toFixed(2);
}
function formatNumber(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '—';
  const a = Math.abs(n);
  if (a >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  if (a >= 1e4) return (n / 1e3).toFixed(1) + 'k';
  if (a >= 100 || Number.isInteger(n)) return n.toFixed(0);
  if (a >= 1) return n.toFixed(2);
  return n.toPrecision(3);
}
// "/long/dir/prog --x" -> "…/prog --x": the program's name matters, not where Bazel put it.
function shortCommand(text) {
  return (text || '').replace(/(^|\s)\/\S*\/([^/\s]+)/g, '$1…/$2');
}
function formatTime(ms) { return ms ? new Date(ms).toLocaleString() : '—'; }
function formatDuration(ms) {
  if (!(ms >= 0)) return '—';
  const sec = Math.round(ms / 1000);
  if (sec < 60) return sec + ' s';
  if (sec < 3600) return Math.floor(sec / 60) + ' min ' + (sec % 60) + ' s';
  return Math.floor(sec / 3600) + ' h ' + Math.floor((sec % 3600) / 60) + ' min';
}

// A resource bar: used of total.
const RESOURCE_NAMES = {object_store_memory: 'obj. store'};
function bar(key, used, total) {
  const pct = total > 0 ? Math.min(100, (100 * used) / total) : 0;
  return h('div', {class: 'bar-row'}, h('span', {class: 'muted', title: key}, RESOURCE_NAMES[key] || key),
    h('div', {class: 'bar', title: `${key}: ${used} of ${total}`},
      h('span', {style: `width:${pct.toFixed(1)}%`}),
      h('em', {}, `${formatAmount(key, used)} / ${formatAmount(key, total)}`)));
}

// ---- charts (SVG) ----

// lineChart({title, series: [{name, points: [[x, y]...]}], xLabel}) -> element. Axes fit the data.
function lineChart({title, series, xLabel, id}) {
  const W = 560, H = 214, L = 52, R = 12, T = 10, B = 36;
  const all = series.flatMap((x) => x.points).filter((p) => Number.isFinite(p[1]));
  const wrap = h('div', {class: 'chart', 'data-chart': id || title});
  wrap.append(h('div', {class: 'title'}, title));
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title});
  wrap.append(svg);
  if (!all.length) {
    svg.append(s('text', {x: W / 2, y: H / 2, 'text-anchor': 'middle'}, 'no data yet'));
    return wrap;
  }
  let [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  // Zoom to the data, but start at 0 when the data comes near it (counts, rates).
  if (y0 >= 0 && y0 < (y1 - y0) * 1.5) y0 = 0;
  if (y1 === y0) y1 = y0 === 0 ? 1 : y0 * 1.1;
  const pad = (y1 - y0) * 0.1;
  y1 += pad;
  if (y0 !== 0) y0 -= pad;
  const px = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const py = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  for (let i = 0; i <= 4; ++i) {
    const y = y0 + ((y1 - y0) * i) / 4;
    svg.append(s('line', {x1: L, x2: W - R, y1: py(y), y2: py(y), stroke: '#e3e8ee'}));
    svg.append(s('text', {x: L - 6, y: py(y) + 4, 'text-anchor': 'end'}, formatNumber(y)));
  }
  const xTicks = xLabel === 'time' ? [x0, (x0 + x1) / 2, x1] : niceTicks(x0, x1);
  for (const x of xTicks) {
    const label = xLabel === 'time' ? new Date(x).toLocaleTimeString() : formatNumber(x);
    svg.append(s('text', {x: px(x), y: H - B + 15, 'text-anchor': 'middle'}, label));
  }
  svg.append(s('line', {x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: '#9aa6b5'}));
  if (xLabel && xLabel !== 'time') {
    svg.append(s('text', {x: W - R, y: H - 2, 'text-anchor': 'end'}, xLabel));
  }
  const legend = h('div', {class: 'legend'});
  series.forEach((line, i) => {
    const color = COLORS[i % COLORS.length];
    const pts = line.points.filter((p) => Number.isFinite(p[1]));
    if (!pts.length) return;
    svg.append(s('polyline', {
      points: pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(' '),
      fill: 'none', stroke: color, 'stroke-width': 2, 'data-series': line.name,
    }));
    if (pts.length <= 40) {
      for (const p of pts) svg.append(s('circle', {cx: px(p[0]), cy: py(p[1]), r: 2.5, fill: color}));
    }
    const last = pts[pts.length - 1][1];
    legend.append(h('span', {}, h('i', {style: `background:${color}`}), `${line.name} ${formatNumber(last)}`));
  });
  wrap.append(legend);
  return wrap;
}

function niceTicks(a, b) {
  const span = b - a;
  const step = Math.max(1, Math.pow(10, Math.floor(Math.log10(span / 2))));
  const mult = span / step > 10 ? 5 : span / step > 5 ? 2 : 1;
  const ticks = [];
  for (let x = Math.ceil(a / (step * mult)) * step * mult; x <= b + 1e-9; x += step * mult) ticks.push(x);
  return ticks;
}

// ---- API ----

class LoggedOut extends Error {}

async function api(path, options) {
  const res = await fetch(path, Object.assign({credentials: 'same-origin'}, options || {}));
  if (res.status === 401) { showLogin(); throw new LoggedOut('logged out'); }
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || `${path}: HTTP ${res.status}`);
  return body;
}

let nodesById = {};
async function loadNodes() {
  const nodes = await api('/api/v0/nodes');
  nodesById = Object.fromEntries(nodes.map((n) => [n.node_id, n]));
  return nodes;
}
function nodeName(id) {
  if (!id) return '—';
  const node = nodesById[id];
  return node ? `${node.node_ip} (${short(id)})` : short(id);
}

// ---- pages ----
// Each page: {render(main, arg)} called on every poll; `arg` is the part of the hash after the page.
// State that must survive re-renders (filters, selection) lives in the page object.

const pages = {};

pages.overview = {
  async render(main) {
    const [nodes, status, actors, jobs, history] = await Promise.all([
      loadNodes(), api('/api/cluster_status'), api('/api/v0/actors'), api('/api/jobs/'),
      api('/api/v0/nodes/history')]);
    const used = (key) => (status.resources_total[key] || 0) - (status.resources_available[key] || 0);
    const storeUsed = nodes.reduce((sum, n) => sum + (n.state === 'ALIVE' ? n.object_store_used_bytes || 0 : 0), 0);
    const totals = h('div', {class: 'cards'},
      card('Nodes alive', status.alive_nodes, `${status.dead_nodes} dead`),
      card('CPU in use', `${formatAmount('CPU', used('CPU'))} / ${formatAmount('CPU', status.resources_total.CPU || 0)}`),
      card('GPU in use', `${formatAmount('GPU', used('GPU'))} / ${formatAmount('GPU', status.resources_total.GPU || 0)}`),
      card('Object store', formatBytes(storeUsed), 'in use on alive nodes'),
      card('Actors alive', actors.filter((a) => a.state === 'ALIVE' && !a.is_system).length,
        `${actors.filter((a) => a.state === 'DEAD' && !a.is_system).length} dead`),
      card('Jobs running', jobs.filter((j) => j.status === 'RUNNING').length, `${jobs.length} submitted`));
    nodes.sort((a, b) => (b.is_head_node - a.is_head_node) || (a.state === 'ALIVE' ? -1 : 1) - (b.state === 'ALIVE' ? -1 : 1) ||
      a.node_id.localeCompare(b.node_id));
    const rows = nodes.map((n) => {
      const total = n.resources_total || {};
      const avail = n.resources_available || {};
      const keys = Object.keys(total).filter((k) => !k.startsWith('node:')).sort();
      return h('tr', {'data-node': n.node_id},
        h('td', {class: 'mono'}, short(n.node_id), n.is_head_node ? h('div', {class: 'muted'}, 'head') : null),
        h('td', {}, n.node_ip),
        h('td', {}, badge(n.state), n.death_reason ? h('div', {class: 'muted'}, n.death_reason) : null),
        // A resource missing from resources_available has none left (zero entries are omitted).
        h('td', {}, n.state === 'ALIVE' ? keys.map((k) => bar(k, total[k] - (n.resources_available ? avail[k] || 0 : total[k]), total[k])) : '—'),
        h('td', {}, n.state === 'ALIVE' ? formatBytes(n.object_store_used_bytes || 0) : '—',
          n.object_store_spilled_bytes ? h('div', {class: 'muted'}, `${formatBytes(n.object_store_spilled_bytes)} spilled`) : null),
        h('td', {}, Object.entries(n.labels || {}).map(([k, v]) => h('span', {class: 'chip'}, `${k}=${v}`))));
    });
    // The last hour, per node (one sample every interval_s: /api/v0/nodes/history).
    const perNode = (value) => Object.entries(history.nodes).map(([id, samples]) =>
      ({name: nodeName(id), points: samples.map((x) => [x.t, value(x)])}));
    const charts = h('div', {class: 'charts'},
      lineChart({id: 'node-cpu', title: 'CPU in use (% of the machine)', xLabel: 'time',
        series: perNode((x) => x.cpu_percent)}),
      lineChart({id: 'node-memory', title: 'Memory in use (% of the machine)', xLabel: 'time',
        series: perNode((x) => x.memory_total_bytes ? 100 * x.memory_used_bytes / x.memory_total_bytes : NaN)}),
      lineChart({id: 'node-store', title: 'Object store in use (MiB)', xLabel: 'time',
        series: perNode((x) => x.object_store_used_bytes / (1 << 20))}));
    main.replaceChildren(h('h2', {}, 'Cluster'), totals, h('h3', {}, `Nodes (${nodes.length})`),
      table(['Node', 'IP', 'State', 'Resources used / total', 'Object store', 'Labels'], rows),
      h('h3', {}, `The last hour (a sample every ${history.interval_s} s, kept while the head runs)`), charts);
  },
};

pages.jobs = {
  async render(main, id) {
    if (id) return this.renderJob(main, decodeURIComponent(id));
    const [jobs, all] = await Promise.all([api('/api/jobs/'), api('/api/v0/jobs')]);
    jobs.sort((a, b) => (b.start_time || 0) - (a.start_time || 0));
    const now = Date.now();
    const rows = jobs.map((j) => h('tr', {'data-job': j.submission_id},
      h('td', {class: 'mono'}, h('a', {href: `#/jobs/${encodeURIComponent(j.submission_id)}`}, j.submission_id)),
      h('td', {}, badge(j.status)),
      h('td', {}, h('div', {class: 'mono ellipsis', title: j.entrypoint}, shortCommand(j.entrypoint))),
      h('td', {}, formatTime(j.start_time)),
      h('td', {}, formatDuration((j.end_time || now) - j.start_time)),
      h('td', {class: 'muted'}, j.message || '')));
    const drivers = all.filter((j) => j.type === 'DRIVER' && !j.is_system)
      .sort((a, b) => (b.start_time || 0) - (a.start_time || 0)).slice(0, 20);
    const driverRows = drivers.map((j) => h('tr', {},
      h('td', {class: 'mono'}, j.job_id), h('td', {}, badge(j.status)),
      h('td', {}, h('div', {class: 'mono ellipsis', title: j.entrypoint}, shortCommand(j.entrypoint))),
      h('td', {}, formatTime(j.start_time)), h('td', {}, formatDuration((j.end_time || now) - j.start_time)),
      h('td', {}, j.namespace)));
    main.replaceChildren(h('h2', {}, `Submitted jobs (${jobs.length})`),
      table(['Submission', 'Status', 'Entrypoint', 'Started', 'Duration', 'Message'], rows, 'no jobs submitted yet'),
      h('h3', {}, 'Drivers (latest 20)'),
      table(['Job', 'Status', 'Entrypoint', 'Started', 'Duration', 'Namespace'], driverRows));
  },

  async renderJob(main, id) {
    const job = await api(`/api/jobs/${encodeURIComponent(id)}`);
    let view = main.querySelector('#job-view');
    if (!view || view.dataset.job !== id) {
      const stop = h('button', {class: 'danger', id: 'job-stop', type: 'button', onclick: async () => {
        stop.disabled = true;
        try { await api(`/api/jobs/${encodeURIComponent(id)}/stop`, {method: 'POST'}); } catch (e) { setStatus(e.message); }
      }}, 'Stop job');
      view = h('div', {id: 'job-view'},
        h('div', {class: 'toolbar'}, h('a', {href: '#/jobs'}, '← all jobs'), h('h2', {style: 'margin:0'}, `Job ${id}`), stop),
        h('div', {class: 'panel kv', id: 'job-details'}),
        h('h3', {}, 'Output (live)'),
        h('pre', {class: 'log', id: 'job-log'}),
        h('div', {id: 'job-related'}));
      view.dataset.job = id;
      main.replaceChildren(view);
      openLogTail(id, view.querySelector('#job-log'));
    }
    const details = [['Status', badge(job.status)], ['Entrypoint', h('span', {class: 'mono'}, job.entrypoint)],
      ['Started', formatTime(job.start_time)], ['Duration', formatDuration((job.end_time || Date.now()) - job.start_time)],
      ['Message', job.message || '—'], ['Driver exit code', job.driver_exit_code ?? '—'],
      ['Driver node', nodeName(job.driver_node_id)]];
    view.querySelector('#job-details').replaceChildren(...details.flatMap(([k, v]) => [h('div', {}, k), h('div', {}, v)]));
    view.querySelector('#job-stop').disabled = ['STOPPED', 'SUCCEEDED', 'FAILED'].includes(job.status);
    await this.renderRelated(view.querySelector('#job-related'), id);
  },

  // The tasks, actors and placement groups of the submission's driver (its job ID comes with
  // the driver's registration: /api/v0/jobs).
  async renderRelated(box, id) {
    const all = await api('/api/v0/jobs');
    const driver = all.find((j) => j.type === 'DRIVER' && j.submission_id === id);
    if (!driver) { box.replaceChildren(h('p', {class: 'muted'}, 'the job\'s driver has not registered yet')); return; }
    const jobId = driver.job_id;
    const [tasks, actors, groups] = await Promise.all([
      api('/api/v0/tasks?' + new URLSearchParams({job_id: jobId, limit: '1000'})),
      api('/api/v0/actors'), api('/api/v0/placement_groups'), loadNodes()]);
    const mine = actors.filter((a) => a.job_id === jobId);
    const myGroups = groups.filter((g) => g.creator_job_id === jobId);
    box.replaceChildren(
      h('h3', {id: 'job-tasks-title'}, `Tasks (${tasks.total}` + (tasks.total > tasks.result.length ? `, the latest ${tasks.result.length} shown` : '') + ')'),
      h('div', {id: 'job-tasks'}, table(TASK_HEADERS, taskRows(tasks.result), 'no tasks')),
      h('p', {}, h('a', {href: '#/timeline', onclick: () => { pages.timeline.job = jobId; }}, 'this job\'s timeline →')),
      h('h3', {}, `Actors (${mine.length})`),
      h('div', {id: 'job-actors'}, table(['Actor', 'Class', 'Name', 'State', 'Node', 'PID'], mine.map((a) => h('tr', {'data-actor': a.actor_id},
        h('td', {class: 'mono'}, short(a.actor_id)), h('td', {class: 'mono'}, a.class_name), h('td', {}, a.name || '—'),
        h('td', {}, badge(a.state)), h('td', {}, nodeName(a.node_id)), h('td', {}, a.pid || '—'))), 'no actors')),
      h('h3', {}, `Placement groups (${myGroups.length})`),
      h('div', {id: 'job-groups'}, table(['Group', 'Name', 'Strategy', 'State'], myGroups.map((g) => h('tr', {'data-group': g.placement_group_id},
        h('td', {class: 'mono'}, short(g.placement_group_id)), h('td', {}, g.name || '—'), h('td', {}, g.strategy),
        h('td', {}, badge(g.state)))), 'no placement groups')));
  },
};

// The open job page's live output: a WebSocket to /api/jobs/{id}/logs/tail (the session cookie
// authenticates the upgrade), text frames appended as they come; the server closes it normally
// (1000) once the job has ended. A dropped connection resumes from the bytes already shown.
let logTail = null;  // {id, ws, bytes, closed}

function closeLogTail() {
  if (!logTail) return;
  logTail.closed = true;
  if (logTail.ws) logTail.ws.close();
  logTail = null;
}

function openLogTail(id, pre) {
  closeLogTail();
  const tail = {id, ws: null, bytes: 0, closed: false};
  const encoder = new TextEncoder();
  const connect = () => {
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = new WebSocket(`${scheme}://${location.host}/api/jobs/${encodeURIComponent(id)}/logs/tail?offset=${tail.bytes}`);
    tail.ws = ws;
    ws.onmessage = (event) => {
      tail.bytes += encoder.encode(event.data).length;
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
      pre.append(event.data);
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    };
    ws.onclose = (event) => {
      if (!tail.closed && event.code !== 1000) setTimeout(() => { if (!tail.closed) connect(); }, 2000);
    };
  };
  connect();
  logTail = tail;
}

pages.actors = {
  state: 'ALL', name: '', system: false,
  async render(main) {
    const [actors] = await Promise.all([api('/api/v0/actors'), loadNodes()]);
    let toolbar = main.querySelector('#actor-toolbar');
    if (!toolbar) {
      const states = ['ALL', 'ALIVE', 'DEAD', 'PENDING_CREATION', 'RESTARTING', 'DEPENDENCIES_UNREADY'];
      const select = h('select', {id: 'actor-state', onchange: (e) => { this.state = e.target.value; refresh(); }},
        states.map((x) => h('option', {value: x, selected: x === this.state}, x === 'ALL' ? 'all states' : x)));
      const search = h('input', {id: 'actor-filter', type: 'search', placeholder: 'class or name contains…', value: this.name,
        oninput: (e) => { this.name = e.target.value; refresh(); }});
      const system = h('label', {}, h('input', {type: 'checkbox', checked: this.system,
        onchange: (e) => { this.system = e.target.checked; refresh(); }}), ' Troupe\'s own actors');
      toolbar = h('div', {class: 'toolbar', id: 'actor-toolbar'}, select, search, system);
      main.replaceChildren(h('h2', {}, 'Actors'), toolbar, h('div', {id: 'actor-table'}));
    }
    const needle = this.name.toLowerCase();
    const shown = actors.filter((a) => (this.system || !a.is_system) &&
      (this.state === 'ALL' || a.state === this.state) &&
      (!needle || a.class_name.toLowerCase().includes(needle) || (a.name || '').toLowerCase().includes(needle)));
    const rank = {ALIVE: 0, RESTARTING: 1, PENDING_CREATION: 2, DEPENDENCIES_UNREADY: 3, DEAD: 4};
    shown.sort((a, b) => (rank[a.state] ?? 5) - (rank[b.state] ?? 5) || a.class_name.localeCompare(b.class_name));
    const rows = shown.map((a) => h('tr', {'data-actor': a.actor_id},
      h('td', {class: 'mono'}, short(a.actor_id)), h('td', {class: 'mono'}, a.class_name), h('td', {}, a.name || '—'),
      h('td', {}, badge(a.state)), h('td', {}, nodeName(a.node_id)), h('td', {}, a.pid || '—'),
      h('td', {}, a.num_restarts), h('td', {class: 'death-cause'}, a.death_cause || '')));
    main.querySelector('#actor-table').replaceChildren(
      h('div', {class: 'muted', style: 'margin-bottom:6px'}, `${shown.length} of ${actors.length} actors`),
      table(['Actor', 'Class', 'Name', 'State', 'Node', 'PID', 'Restarts', 'Death cause'], rows, 'no actors match'));
  },
};

pages['placement-groups'] = {
  async render(main) {
    const [groups] = await Promise.all([api('/api/v0/placement_groups'), loadNodes()]);
    const rows = groups.map((g) => h('tr', {},
      h('td', {class: 'mono'}, short(g.placement_group_id)), h('td', {}, g.name || '—'), h('td', {}, g.strategy),
      h('td', {}, g.is_detached ? 'detached' : `job ${g.creator_job_id || '?'}`),
      h('td', {}, badge(g.state), g.pending_reason ? h('div', {class: 'muted'}, g.pending_reason) : null),
      h('td', {}, g.bundles.map((b, i) => h('div', {},
        h('span', {class: 'chip'}, `#${i}`),
        Object.entries(b).map(([k, v]) => `${k}: ${formatAmount(k, v)}`).join(', '),
        h('span', {class: 'muted'}, ' → ', (g.bundle_nodes || [])[i] ? nodeName(g.bundle_nodes[i]) : 'not placed'))))));
    main.replaceChildren(h('h2', {}, `Placement groups (${groups.length})`),
      table(['Group', 'Name', 'Strategy', 'Lifetime', 'State', 'Bundles → node'], rows, 'no placement groups'));
  },
};

// A task list's rows (the tasks page, a job's page).
function taskRows(tasks) {
  return tasks.map((t) => h('tr', {'data-task': t.task_id},
    h('td', {class: 'mono'}, short(t.task_id)), h('td', {class: 'mono'}, t.name), h('td', {}, t.type),
    h('td', {}, badge(t.state)), h('td', {class: 'mono'}, short(t.job_id)), h('td', {}, nodeName(t.node_id)),
    h('td', {}, t.worker_pid || '—'), h('td', {}, t.attempt_number),
    h('td', {}, h('div', {class: 'ellipsis death-cause', title: t.error_message || ''}, t.error_message || ''))));
}
const TASK_HEADERS = ['Task', 'Function', 'Type', 'State', 'Job', 'Node', 'PID', 'Attempt', 'Error'];
const TASK_PAGE_ROWS = 50;

pages.tasks = {
  samples: [],  // [{t, submitted, finished, failed, retried, running}]
  // The table's filters (server side: the GCS filters the task table) and its page.
  state: 'ALL', name: '', job: '', limit: 100, page: 0,
  async sample() {
    const summary = await api('/api/v0/tasks/summarize');
    const counts = {};
    for (const entry of Object.values(summary.summary)) {
      for (const [state, n] of Object.entries(entry.state_counts)) counts[state] = (counts[state] || 0) + n;
    }
    const submitted = Object.values(counts).reduce((a, b) => a + b, 0);
    this.samples.push({t: Date.now(), submitted, finished: counts.FINISHED || 0, failed: counts.FAILED || 0,
      retried: summary.retried_attempts || 0, running: counts.RUNNING || 0});
    if (this.samples.length > TASK_SAMPLES) this.samples.shift();
    return summary;
  },
  query() {
    const q = new URLSearchParams({limit: String(this.limit)});
    if (this.state !== 'ALL') q.append('filter', `state=${this.state}`);
    if (this.name) q.append('filter', `name=${this.name}`);
    if (this.job) q.append('job_id', this.job);
    return q.toString();
  },
  skeleton(main) {
    const refilter = (update) => (e) => { update(e.target.value.trim()); this.page = 0; refresh(); };
    const states = ['ALL', 'PENDING_ARGS_AVAIL', 'PENDING_NODE_ASSIGNMENT', 'SUBMITTED_TO_WORKER', 'RUNNING',
      'FINISHED', 'FAILED'];
    const toolbar = h('div', {class: 'toolbar', id: 'task-toolbar'},
      h('select', {id: 'task-state', onchange: refilter((v) => { this.state = v; })},
        states.map((x) => h('option', {value: x, selected: x === this.state}, x === 'ALL' ? 'all states' : x))),
      h('input', {id: 'task-name', type: 'search', list: 'task-names', placeholder: 'function (exact name)',
        value: this.name, onchange: refilter((v) => { this.name = v; })}),
      h('datalist', {id: 'task-names'}),
      h('input', {id: 'task-job', type: 'search', placeholder: 'job ID', value: this.job,
        onchange: refilter((v) => { this.job = v; })}),
      h('label', {}, 'fetch ', h('select', {id: 'task-limit', onchange: refilter((v) => { this.limit = Number(v); })},
        [[100, '100'], [1000, '1,000'], [10000, '10,000'], [0, 'all']].map(([v, text]) =>
          h('option', {value: v, selected: v === this.limit}, text))), ' tasks'));
    const pager = h('div', {class: 'toolbar', id: 'task-pager'},
      h('button', {type: 'button', id: 'task-prev', onclick: () => { this.page = Math.max(0, this.page - 1); refresh(); }}, '← previous'),
      h('span', {id: 'task-range', class: 'muted'}),
      h('button', {type: 'button', id: 'task-next', onclick: () => { this.page += 1; refresh(); }}, 'next →'));
    main.replaceChildren(h('h2', {}, 'Tasks'), h('div', {id: 'task-overview'}),
      h('h3', {}, 'Task list'), toolbar, h('div', {id: 'task-table'}), pager,
      h('h3', {}, 'By function'), h('div', {id: 'task-by-function'}));
  },
  async render(main) {
    if (!main.querySelector('#task-toolbar')) this.skeleton(main);
    const [summary, list] = await Promise.all([this.sample(), api('/api/v0/tasks?' + this.query()), loadNodes()]);
    const last = this.samples[this.samples.length - 1];
    const series = (key) => ({name: key, points: this.samples.map((x) => [x.t, x[key]])});
    const rate = (key) => ({name: key, points: this.samples.slice(1).map((x, i) => {
      const prev = this.samples[i];
      return [x.t, Math.max(0, (x[key] - prev[key]) / ((x.t - prev.t) / 1000))];
    })});
    main.querySelector('#task-overview').replaceChildren(
      h('div', {class: 'cards'}, card('Attempts', last.submitted, summary.num_dropped ? `${summary.num_dropped} dropped` : 'recorded'),
        card('Running', last.running), card('Finished', last.finished), card('Failed', last.failed), card('Retried', last.retried)),
      h('div', {class: 'charts'},
        lineChart({id: 'task-counts', title: 'Task attempts (cumulative)', xLabel: 'time',
          series: ['submitted', 'finished', 'failed', 'retried'].map(series)}),
        lineChart({id: 'task-rates', title: 'Rates (per second, since this page opened)', xLabel: 'time',
          series: ['submitted', 'finished', 'failed', 'retried'].map(rate)})));
    const names = Object.entries(summary.summary).sort((a, b) => a[0].localeCompare(b[0]));
    main.querySelector('#task-names').replaceChildren(...names.map(([name]) => h('option', {value: name})));
    // The fetched tasks, TASK_PAGE_ROWS a page.
    const tasks = list.result;
    const pageCount = Math.max(1, Math.ceil(tasks.length / TASK_PAGE_ROWS));
    this.page = Math.min(this.page, pageCount - 1);
    const from = this.page * TASK_PAGE_ROWS;
    const shown = tasks.slice(from, from + TASK_PAGE_ROWS);
    main.querySelector('#task-table').replaceChildren(
      table(TASK_HEADERS, taskRows(shown), 'no tasks match'));
    main.querySelector('#task-range').textContent = tasks.length ?
      `${from + 1}–${from + shown.length} of ${tasks.length} fetched; ${list.total} match` +
      (list.total > tasks.length ? ' (fetch more to see them)' : '') : `0 of ${list.total} match`;
    main.querySelector('#task-prev').disabled = this.page === 0;
    main.querySelector('#task-next').disabled = this.page >= pageCount - 1;
    const rows = names.map(([name, entry]) => h('tr', {}, h('td', {class: 'mono'}, name), h('td', {}, entry.type),
      h('td', {}, Object.entries(entry.state_counts).map(([state, n]) => h('span', {class: 'chip'}, `${state}: ${n}`)))));
    main.querySelector('#task-by-function').replaceChildren(table(['Function', 'Type', 'States'], rows, 'no tasks recorded'));
  },
};

// The timeline of the tasks that ran (/api/v0/timeline, the trace `troupe timeline` writes): one
// row per worker, one bar per task attempt, the latest TIMELINE_BARS of them.
const TIMELINE_BARS = 2000;
pages.timeline = {
  job: '',
  async render(main) {
    const q = this.job ? '?' + new URLSearchParams({job_id: this.job}) : '';
    if (!main.querySelector('#timeline-toolbar')) {
      main.replaceChildren(h('h2', {}, 'Timeline'),
        h('div', {class: 'toolbar', id: 'timeline-toolbar'},
          h('input', {id: 'timeline-job', type: 'search', placeholder: 'job ID (all jobs if empty)', value: this.job,
            onchange: (e) => { this.job = e.target.value.trim(); refresh(); }}),
          h('a', {id: 'timeline-download', download: 'timeline.json'}, 'download as a Chrome trace')),
        h('div', {id: 'timeline-chart'}));
    }
    main.querySelector('#timeline-download').setAttribute('href', '/api/v0/timeline' + q);
    const [trace] = await Promise.all([api('/api/v0/timeline' + q), loadNodes()]);
    const names = {};  // 'pid/tid' or 'pid' -> name
    const bars = [];
    for (const e of trace.traceEvents) {
      if (e.ph === 'M') names[e.name === 'process_name' ? `${e.pid}` : `${e.pid}/${e.tid}`] = e.args.name;
      else if (e.ph === 'X') bars.push(e);
    }
    bars.sort((a, b) => a.ts - b.ts);
    const kept = bars.slice(-TIMELINE_BARS);
    const chart = main.querySelector('#timeline-chart');
    if (!kept.length) { chart.replaceChildren(h('p', {class: 'muted'}, 'no task has run to its end yet')); return; }
    const lanes = [...new Set(kept.map((e) => `${e.pid}/${e.tid}`))].sort();
    const t0 = kept[0].ts, t1 = Math.max(...kept.map((e) => e.ts + e.dur));
    const width = 1100, label = 380, lane = 18, top = 24, span = Math.max(1, t1 - t0);
    const svg = s('svg', {viewBox: `0 0 ${width} ${top + lanes.length * lane + 4}`, class: 'timeline', id: 'timeline-svg'});
    const x = (ts) => label + (ts - t0) / span * (width - label - 10);
    svg.append(s('text', {x: label, y: 14, class: 'axis'}, formatTime(t0 / 1000)),
      s('text', {x: width - 10, y: 14, class: 'axis', 'text-anchor': 'end'}, `+${formatDuration(span / 1000)}`));
    const colorOf = {};
    lanes.forEach((key, i) => {
      const y = top + i * lane;
      const node = (names[key.split('/')[0]] || '').replace(/^Node /, '');
      svg.append(s('text', {x: 0, y: y + 13, class: 'lane'},
        `${nodeName(node)} · ${(names[key] || key).replace(/^Worker /, 'worker ')}`.slice(0, 56)));
    });
    for (const e of kept) {
      const y = top + lanes.indexOf(`${e.pid}/${e.tid}`) * lane;
      if (!(e.name in colorOf)) colorOf[e.name] = COLORS[Object.keys(colorOf).length % COLORS.length];
      const failed = e.args && e.args.state === 'FAILED';
      const bar = s('rect', {x: x(e.ts), y: y + 2, width: Math.max(1, x(e.ts + e.dur) - x(e.ts)), height: lane - 4,
        fill: failed ? '#c62f2f' : colorOf[e.name], 'data-task': e.args ? e.args.task_id : ''});
      bar.append(s('title', {}, `${e.name} (${e.args ? e.args.state : ''}) ${formatDuration(e.dur / 1000)}`));
      svg.append(bar);
    }
    chart.replaceChildren(
      h('div', {class: 'muted'}, `${kept.length} task attempts` + (bars.length > kept.length ? ` (the latest of ${bars.length})` : '') +
        ` on ${lanes.length} workers; failed ones in red; hover a bar for its task`),
      h('div', {class: 'panel'}, svg));
  },
};

pages.train = {
  async render(main, runId) {
    const [runs] = await Promise.all([api('/api/v0/train_runs'), loadNodes()]);
    const selected = runs.find((r) => r.run_id === decodeURIComponent(runId || '')) || runs[0];
    const list = h('div', {class: 'list', id: 'train-runs'}, runs.map((r) => h('a', {
      href: `#/train/${encodeURIComponent(r.run_id)}`, class: r === selected ? 'active' : null, 'data-run': r.run_id},
    h('div', {}, h('b', {}, r.name), ' ', badge(r.status)), h('small', {}, `${formatTime(r.start_time_ms)} · ${r.num_workers} workers`))));
    if (!selected) {
      main.replaceChildren(h('h2', {}, 'Training runs'),
        h('p', {class: 'muted'}, 'No DataParallelTrainer runs yet: a run appears here as soon as Fit() starts.'));
      return;
    }
    main.replaceChildren(h('h2', {}, 'Training runs'), h('div', {class: 'split'}, list, this.renderRun(selected)));
  },

  renderRun(run) {
    const metrics = run.metrics || [];
    const x = (m, i) => (Number.isFinite(m.epoch) ? m.epoch : i + 1);
    const keys = [...new Set(metrics.flatMap((m) => Object.keys(m)))].filter((k) => k !== 'epoch');
    // Related metrics share a chart: losses together; everything else alone.
    const groups = [];
    const losses = keys.filter((k) => /loss/.test(k));
    if (keys.includes('accuracy')) groups.push(['accuracy']);
    if (losses.length) groups.push(losses);
    if (keys.includes('images_per_s')) groups.push(['images_per_s']);
    for (const k of keys) if (!groups.flat().includes(k)) groups.push([k]);
    const charts = groups.map((group) => lineChart({id: group.join('+'), title: group.join(', '), xLabel: 'epoch',
      series: group.map((k) => ({name: k, points: metrics.map((m, i) => [x(m, i), m[k] ?? NaN])}))}));
    const duration = (run.end_time_ms || Date.now()) - run.start_time_ms;
    const details = [['Status', badge(run.status)], ['Run id', h('span', {class: 'mono'}, run.run_id)],
      ['Started', formatTime(run.start_time_ms)], ['Duration', formatDuration(duration)],
      ['Workers', `${run.num_workers} × ${Object.entries(run.resources_per_worker || {}).map(([k, v]) => `${k} ${v}`).join(', ')} (${run.strategy})`],
      ['Attempt / restarts', `${run.attempt + 1} / ${run.restarts}`], ['Driver job', h('span', {class: 'mono'}, run.job_id || '—')],
      ['Storage', h('div', {class: 'mono ellipsis', title: run.storage_path}, run.storage_path)]];
    if (run.error) details.push(['Error', h('span', {class: 'error'}, run.error)]);
    const workerRows = (run.workers || []).map((w) => h('tr', {}, h('td', {}, w.rank), h('td', {}, nodeName(w.node_id)),
      h('td', {}, w.gpu >= 0 ? w.gpu : '—')));
    // Elastic runs' membership changes and restarts: generation, who left, why, recovery time.
    const membershipRows = (run.membership || []).map((e) => h('tr', {},
      h('td', {}, e.generation || '—'), h('td', {}, e.step >= 0 ? e.step : '—'), h('td', {}, e.change),
      h('td', {}, (e.ranks || []).join(', ') || '—'), h('td', {}, e.why),
      h('td', {}, e.recovery_s >= 0 ? `${formatNumber(e.recovery_s)} s` : '—'),
      h('td', {}, e.world_size), h('td', {}, formatTime(e.time_ms)),
      h('td', {class: 'ellipsis', title: e.detail}, e.detail)));
    if (run.min_workers && run.min_workers < run.num_workers) {
      details.push(['Elastic', `down to ${run.min_workers} workers`]);
    }
    if (run.max_workers) details.push(['Replacements', `up to ${run.max_workers} workers`]);
    const checkpointRows = (run.checkpoints || []).map((c) => h('tr', {}, h('td', {class: 'mono'}, c.path),
      h('td', {}, Object.entries(c.metrics || {}).filter(([k]) => ['epoch', 'accuracy', 'train_loss', 'loss'].includes(k))
        .map(([k, v]) => h('span', {class: 'chip'}, `${k}=${formatNumber(v)}`)))));
    return h('div', {id: 'train-run', 'data-run': run.run_id},
      h('div', {class: 'panel kv kv2'}, details.flatMap(([k, v]) => [h('div', {}, k), h('div', {}, v)])),
      h('div', {class: 'charts'}, charts.length ? charts : h('p', {class: 'muted'}, 'no reports yet')),
      h('div', {style: 'display:grid;grid-template-columns:1fr 2fr;gap:12px'},
        h('div', {}, h('h3', {}, 'Worker placement'), table(['Rank', 'Node', 'GPU'], workerRows)),
        h('div', {}, h('h3', {}, 'Checkpoints'), table(['Path', 'Metrics'], checkpointRows, 'no checkpoints'))),
      membershipRows.length ? h('div', {id: 'train-membership'}, h('h3', {}, 'Membership changes'),
        table(['Generation', 'Step', 'Change', 'Ranks (left or joined)', 'Why', 'Recovery', 'Workers after', 'When', 'Detail'],
          membershipRows)) : null);
  },
};

// Log search: the last LOG_SEARCH_BYTES of each of a node's files (the newest LOG_SEARCH_FILES),
// lines containing the text (any case), at most LOG_SEARCH_MATCHES of them.
const LOG_SEARCH_FILES = 50, LOG_SEARCH_BYTES = 1 << 20, LOG_SEARCH_MATCHES = 500;

pages.logs = {
  node: '', file: '', typed: '', files: [],
  search: null,  // {text, node, matches: [{file, line}], files, truncated} once searched
  async runSearch(text, files) {
    this.search = {text, node: this.node, matches: [], files: 0, truncated: false, running: true};
    const search = this.search;
    refresh();
    const needle = text.toLowerCase();
    const newest = files.slice().sort((a, b) => b.mtime_ms - a.mtime_ms).slice(0, LOG_SEARCH_FILES);
    for (const f of newest) {
      if (this.search !== search) return;  // another search started, or the node changed
      const file = await api(`/api/v0/logs/file?node_id=${encodeURIComponent(search.node)}&filename=${encodeURIComponent(f.name)}` +
        `&lines=100000&max_bytes=${LOG_SEARCH_BYTES}`).catch(() => null);
      ++search.files;
      if (!file) continue;
      for (const line of file.data.split('\n')) {
        if (!line.toLowerCase().includes(needle)) continue;
        if (search.matches.length >= LOG_SEARCH_MATCHES) { search.truncated = true; break; }
        search.matches.push({file: f.name, line});
      }
      if (search.truncated) break;
    }
    search.running = false;
    refresh();
  },
  renderSearch(box) {
    const search = this.search;
    if (!search || search.node !== this.node) { box.replaceChildren(); return; }
    box.replaceChildren(
      h('div', {class: 'muted', id: 'log-search-summary'},
        `${search.matches.length}${search.truncated ? '+' : ''} lines containing “${search.text}” in ${search.files} file(s)` +
        (search.running ? ' (searching…)' : '') + ' — the last 1 MiB of each file is searched'),
      h('pre', {class: 'log matches', id: 'log-matches'}, search.matches.map((m) => h('div', {'data-file': m.file},
        h('a', {href: '#/logs', onclick: (e) => { e.preventDefault(); this.file = m.file; refresh(); }}, m.file), ': ', m.line))));
  },
  // Rebuilt only when the node list or a node's files change, so a click is never lost to a
  // re-render; the open file's text is refreshed on every poll.
  async render(main) {
    const listing = await api('/api/v0/logs');
    const nodes = listing.nodes || [];
    if (!nodes.some((n) => n.node_id === this.node)) {
      this.node = nodes.length ? (nodes.find((n) => n.is_head_node) || nodes[0]).node_id : '';
      this.file = '';
    }
    const node = nodes.find((n) => n.node_id === this.node);
    const files = (node ? node.files : []).slice().sort((a, b) => a.name.localeCompare(b.name));
    this.files = files;  // the selected node's, for a search started from the box
    const signature = JSON.stringify([this.node, this.file, nodes.map((n) => n.node_id), files,
      (listing.unreachable_nodes || []).length]);
    if (!main.querySelector('#log-view') || main.dataset.signature !== signature) {
      main.dataset.signature = signature;
      const nodeSelect = h('select', {id: 'log-node', onchange: (e) => { this.node = e.target.value; this.file = ''; refresh(); }},
        nodes.map((n) => h('option', {value: n.node_id, selected: n.node_id === this.node},
          `${n.node_ip} ${short(n.node_id)}${n.is_head_node ? ' (head)' : ''}`)));
      const list = h('div', {class: 'list', id: 'log-files'}, files.map((f) => h('a', {
        href: '#/logs', class: f.name === this.file ? 'active' : null, 'data-file': f.name,
        onclick: (e) => { e.preventDefault(); this.file = f.name; refresh(); }},
      f.name, h('small', {}, `${formatBytes(f.size)} · ${formatTime(f.mtime_ms)}`))));
      const unreachable = (listing.unreachable_nodes || []).length;
      // The view is rebuilt as files grow: what is typed in the search box, and its focus, stay.
      const typing = document.activeElement && document.activeElement.id === 'log-search';
      const searchBox = h('input', {id: 'log-search', type: 'search', placeholder: 'search this node\'s logs…',
        value: this.typed, oninput: (e) => { this.typed = e.target.value; },
        onchange: (e) => {
          const text = e.target.value.trim();
          if (text) this.runSearch(text, this.files); else { this.search = null; refresh(); }
        }});
      main.replaceChildren(h('div', {id: 'log-view', 'data-node': this.node}, h('h2', {}, 'Logs'),
        h('div', {class: 'toolbar'}, 'Node', nodeSelect, searchBox,
          unreachable ? h('span', {class: 'error'}, `${unreachable} node(s) unreachable`) : null),
        h('div', {id: 'log-results'}),
        h('div', {class: 'split'}, list, h('div', {},
          this.file ? h('h3', {style: 'margin-top:0'}, this.file) : null,
          this.file ? h('pre', {class: 'log', id: 'log-text'}) :
            h('p', {class: 'muted'}, 'Pick a file: its last 300 lines show here, refreshed live.')))));
      if (typing) { searchBox.focus(); searchBox.setSelectionRange(this.typed.length, this.typed.length); }
    }
    this.renderSearch(main.querySelector('#log-results'));
    if (!this.file) return;
    const file = await api(`/api/v0/logs/file?node_id=${encodeURIComponent(this.node)}&filename=${encodeURIComponent(this.file)}&lines=300`);
    const pre = main.querySelector('#log-text');
    if (pre && pre.textContent !== file.data) {
      const atBottom = !pre.textContent || pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
      pre.textContent = file.data;
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
  },
};

// ---- shell: routing, polling, login ----

let timer = null;
let running = false;
let again = false;  // a refresh asked for while one ran (e.g. a click): run it right after

function route() {
  const [, name, ...rest] = (location.hash || '#/overview').split('/');
  return {name: pages[name] ? name : 'overview', arg: rest.join('/')};
}

function setStatus(text) { document.getElementById('status').textContent = text; }

async function refresh() {
  if (running) { again = true; return; }
  running = true;
  const {name, arg} = route();
  const main = document.getElementById('main');
  if (main.dataset.page !== `${name}/${arg}`) {
    main.dataset.page = `${name}/${arg}`;
    closeLogTail();
    main.replaceChildren(h('p', {class: 'muted'}, 'Loading…'));
  }
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === name);
  try {
    await pages[name].render(main, arg);
    setStatus(`updated ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    if (!(e instanceof LoggedOut)) setStatus(`error: ${e.message}`);
  } finally {
    running = false;
    if (again) { again = false; refresh(); }
  }
}

function start() {
  document.getElementById('login').hidden = true;
  document.getElementById('logout').hidden = false;
  if (!timer) timer = setInterval(refresh, POLL_MS);
  refresh();
}

function showLogin() {
  closeLogTail();
  clearInterval(timer);
  timer = null;
  document.getElementById('logout').hidden = true;
  document.getElementById('login').hidden = false;
  document.getElementById('login-token').focus();
}

async function login(event) {
  event.preventDefault();
  const error = document.getElementById('login-error');
  error.textContent = '';
  const res = await fetch('/dashboard/login', {method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({token: document.getElementById('login-token').value})});
  if (res.ok) {
    document.getElementById('login-token').value = '';
    start();
    return;
  }
  const body = await res.json().catch(() => ({}));
  error.textContent = res.status === 401 ? 'Wrong token.' : (body.error || `Login failed (HTTP ${res.status}).`);
}

async function logout() {
  await fetch('/dashboard/logout', {method: 'POST', credentials: 'same-origin'});
  showLogin();
}

document.addEventListener('DOMContentLoaded', async () => {
  document.getElementById('login-form').addEventListener('submit', login);
  document.getElementById('logout').addEventListener('click', logout);
  window.addEventListener('hashchange', refresh);
  const session = await fetch('/dashboard/session', {credentials: 'same-origin'}).then((r) => r.json()).catch(() => ({}));
  if (session.logged_in) start(); else showLogin();
});
