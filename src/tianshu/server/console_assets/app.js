// The Tianshu web console: plain JavaScript, no build step, served by `tianshu serve`. It reads
// the JSON API (docs/api.md) with the console session cookie and redraws every 2 s. Views by
// hash: #cluster, #queues, #jobs, #network, #job/ID. "#token=T[&view=V]" logs in with T (a fragment never
// reaches a server or its logs) and then shows V. Text from the API is set as text, never HTML.
'use strict';

const kPollMs = 2000;
let timer = null;
let chart = null;

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

async function api(path) {
  const r = await fetch(path, {credentials: 'same-origin', headers: {Accept: 'application/json'}});
  if (r.status === 401) throw new Error('unauthorised');
  const body = await r.json();
  if (!r.ok) throw new Error((body.error && body.error.message) || 'HTTP ' + r.status);
  return body;
}

// A stable colour per job id.
function jobColour(id) {
  let h = 0;
  for (const c of id) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return 'hsl(' + (h % 360) + ', 55%, 42%)';
}

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 120) return s + ' s';
  if (s < 7200) return Math.round(s / 60) + ' min';
  return Math.round(s / 3600) + ' h';
}

function fillTable(id, rows) {
  const body = $(id).tBodies[0];
  body.replaceChildren(...rows.map((cells) => el('tr', {}, ...cells.map(
      (c) => (c instanceof Node ? el('td', {}, c) : el('td', {text: String(c)}))))));
}

function jobLink(id) { return el('a', {href: '#job/' + id, text: id}); }

// ---- login ----

async function login(token) {
  const r = await fetch('/console/login', {
    method: 'POST', credentials: 'same-origin',
    headers: {'Content-Type': 'application/json'}, body: JSON.stringify({token}),
  });
  const body = await r.json();
  if (!r.ok) throw new Error((body.error && body.error.message) || 'HTTP ' + r.status);
  return body;
}

function showLogin(message) {
  for (const v of document.querySelectorAll('.view')) v.hidden = true;
  $('nav').hidden = true;
  $('logout').hidden = true;
  $('who').textContent = '';
  $('login').hidden = false;
  $('login-error').textContent = message || '';
}

// ---- views ----

function switchLabel(labels) {
  for (const k of ['switch', 'leaf', 'rack']) if (labels && labels[k]) return k + ' ' + labels[k];
  return 'no switch label';
}

function drawChart(samples) {
  const box = $('util-chart');
  box.dataset.points = String(samples.length);
  if (typeof Dygraph === 'undefined') {
    $('chart-missing').hidden = false;
    return;
  }
  const rows = samples.map((s) => [new Date(s.time_ms), s.gpus_allocated, s.gpus_total,
    s.active_jobs, s.pending_jobs]);
  if (rows.length === 0) rows.push([new Date(), 0, 0, 0, 0]);
  const opts = {
    labels: ['time', 'GPUs allocated', 'GPUs total', 'active jobs', 'pending jobs'],
    labelsDiv: $('util-legend'), legend: 'always', stepPlot: true, includeZero: true,
    ylabel: 'GPUs / jobs', colors: ['#2e8b57', '#9aa3ad', '#3b7dd8', '#c0392b'],
  };
  if (chart) chart.updateOptions({file: rows});
  else chart = new Dygraph(box, rows, opts);
}

async function drawCluster() {
  const [nodes, jobs, util] = await Promise.all(
      [api('/v1/nodes'), api('/v1/jobs?order=newest&limit=500'), api('/v1/utilization')]);
  drawChart(util.samples);
  const byId = new Map(jobs.jobs.map((j) => [j.id, j]));
  const groups = new Map();
  for (const n of nodes.nodes) {
    const g = switchLabel(n.labels);
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(n);
  }
  const seen = new Set();
  const out = [];
  for (const [name, members] of [...groups.entries()].sort()) {
    const cards = members.map((n) => {
      const state = n.state + (n.draining ? ', draining' : n.cordoned ? ', cordoned' : '');
      const gpus = n.devices.map((d) => {
        const a = d.allocations || [];
        const g = el('div', {class: 'gpu' + (a.length ? '' : ' free') +
                               (d.healthy === false ? ' unhealthy' : '')});
        g.dataset.node = n.name;
        g.dataset.index = String(d.index);
        if (a.length === 0) g.append(el('span', {text: 'GPU ' + d.index + ' free'}));
        for (const x of a) {
          seen.add(x.job);
          const j = byId.get(x.job);
          g.style.background = jobColour(x.job);
          g.dataset.job = x.job;
          g.title = x.job + (j ? ' ' + j.name + ' (' + j.state + ')' : '') + ' rank ' + x.rank;
          g.append(el('a', {href: '#job/' + x.job, text: x.job}),
              el('span', {text: 'rank ' + x.rank + (j ? ' · ' + j.state : '')}));
        }
        return g;
      });
      return el('div', {class: 'node ' + n.state + (n.cordoned ? ' cordoned' : '')},
          el('span', {class: 'node-name', text: n.name}),
          el('span', {class: 'node-state', text: state}), el('div', {class: 'gpus'}, ...gpus));
    });
    out.push(el('div', {class: 'switch'}, el('h3', {text: name}),
        el('div', {class: 'nodes'}, ...cards)));
  }
  if (nodes.nodes.length === 0) out.push(el('p', {text: 'No node has registered.'}));
  $('switches').replaceChildren(...out);
  $('jobs-legend').replaceChildren(...[...seen].sort().map((id) => {
    const j = byId.get(id);
    return el('span', {class: 'key'}, el('span', {class: 'swatch'}),
        jobLink(id), ' ' + (j ? j.name + ' · ' + j.state : ''));
  }));
  // Swatch colours through the CSSOM (the policy forbids inline style attributes in markup).
  const keys = $('jobs-legend').querySelectorAll('.swatch');
  [...seen].sort().forEach((id, i) => { keys[i].style.background = jobColour(id); });
}

async function drawQueues() {
  const [queues, jobs] = await Promise.all(
      [api('/v1/queues'), api('/v1/jobs?state=pending&order=oldest&limit=1000')]);
  fillTable('queues-table', queues.queues.map((q) => {
    const quota = q.quota_gpus;
    const bar = el('div', {class: 'bar'}, el('div'));
    const share = quota ? q.gpus_in_use / quota : (queues.cluster_gpus ?
                                                    q.gpus_in_use / queues.cluster_gpus : 0);
    bar.firstChild.style.width = Math.min(100, Math.round(share * 100)) + '%';
    if (quota && q.gpus_in_use > quota) bar.classList.add('over');
    bar.title = quota ? q.gpus_in_use + ' of a quota of ' + quota + ' GPUs' :
                        q.gpus_in_use + ' of ' + queues.cluster_gpus + ' GPUs (no quota)';
    return [q.name, q.gpus_in_use, quota === null || quota === undefined ? 'none' : quota, bar,
      q.active, q.pending];
  }));
  const pending = jobs.jobs.filter((j) => j.state === 'pending');
  fillTable('pending-table', pending.map((j) => [jobLink(j.id), j.name, j.queue, j.owner, j.gpus,
    ago(j.submitted_ms), (j.held ? 'held: ' : '') + (j.message || 'waiting for a cycle')]));
  if (pending.length === 0) fillTable('pending-table', [['none', '', '', '', '', '', '']]);
}

async function drawJobs() {
  const jobs = await api('/v1/jobs?order=newest&limit=200');
  fillTable('jobs-table', jobs.jobs.map((j) => [jobLink(j.id), j.name, j.state, j.queue, j.owner,
    j.gpus, (j.nodes || []).join(' '), j.message || '']));
}

// The attempts as segments of one bar: each state from its transition to the next.
function drawTimeline(job) {
  const h = job.history || [];
  const box = $('job-timeline');
  if (h.length === 0) return box.replaceChildren();
  const start = h[0].time_ms;
  const ended = ['succeeded', 'failed', 'cancelled'].includes(job.state);
  const end = Math.max(ended ? h[h.length - 1].time_ms : Date.now(), start + 1);
  const segs = [];
  let attempt = 0;
  h.forEach((e, i) => {
    const m = /attempt (\d+)/.exec(e.reason || '');
    if (m) attempt = Number(m[1]);
    const to = i + 1 < h.length ? h[i + 1].time_ms : end;
    const s = el('div', {class: 'segment state-' + e.to,
                         text: (attempt ? '#' + attempt + ' ' : '') + e.to});
    s.style.left = (100 * (e.time_ms - start) / (end - start)) + '%';
    s.style.width = Math.max(0.3, 100 * (to - e.time_ms) / (end - start)) + '%';
    s.title = e.to + (attempt ? ' (attempt ' + attempt + ')' : '') + ': ' + e.reason;
    segs.push(s);
  });
  box.replaceChildren(...segs);
}

const logState = {job: '', rank: -1, next: 0, text: ''};

async function drawLog(job) {
  const select = $('job-rank');
  const ranks = (job.placement || []).map((p) => p.rank).sort((a, b) => a - b);
  if (select.dataset.job !== job.id) {
    select.dataset.job = job.id;
    select.replaceChildren(...ranks.map((r) => el('option', {value: String(r), text: 'rank ' + r})));
  }
  if (ranks.length === 0) return ($('job-log').textContent = 'no ranks placed');
  const rank = Number(select.value || ranks[0]);
  if (logState.job !== job.id || logState.rank !== rank) {
    Object.assign(logState, {job: job.id, rank, next: 0, text: ''});
  }
  const r = await fetch('/v1/jobs/' + job.id + '/logs?rank=' + rank + '&offset=' + logState.next,
      {credentials: 'same-origin'});
  if (!r.ok) return ($('job-log').textContent = 'log: HTTP ' + r.status);
  const size = Number(r.headers.get('X-Tianshu-Log-Size') || 0);
  logState.text = (logState.text + await r.text()).slice(-16384);
  logState.next = Number(r.headers.get('X-Tianshu-Log-Next') || logState.next);
  if (size - logState.next > 16384) logState.next = size - 16384;  // only the tail
  $('job-log').textContent = logState.text;
}

async function drawJob(id) {
  const job = await api('/v1/jobs/' + encodeURIComponent(id));
  $('job-title').textContent = job.id + ' · ' + job.name;
  $('job-summary').textContent = job.state + ' · queue ' + job.queue + ' · ' + job.gpus +
      ' GPUs · owner ' + job.owner + ' · attempt ' + job.attempt + ' · ' + (job.message || '');
  drawTimeline(job);
  const byNode = new Map();
  for (const p of job.placement || []) {
    if (!byNode.has(p.node)) byNode.set(p.node, []);
    byNode.get(p.node).push('rank ' + p.rank + ' (GPU ' + p.device + ')');
  }
  fillTable('job-ranks', [...byNode.entries()].map(([n, r]) => [n, r.join(', ')]));
  fillTable('job-events', (job.history || []).slice().reverse().map((e) => [
    new Date(e.time_ms).toLocaleString(), e.from || '—', e.to, e.reason]));
  await drawLog(job);
}

// The measured network (GET /v1/topology/measured): a node-by-node matrix of the probes'
// all-reduce bus bandwidth, each cell shaded by its share of the best figure of its nominal class
// (slow pairs red, stale ones grey), beside the nominal figure; the measured leaves; the probes.
function gbps(x) { return x >= 10 ? x.toFixed(1) : x >= 0.1 ? x.toFixed(2) : x.toFixed(3); }

async function drawNetwork() {
  const [m, nodes] = await Promise.all([api('/v1/topology/measured'), api('/v1/nodes')]);
  const names = [...new Set([...nodes.nodes.map((n) => n.name),
    ...m.pairs.flatMap((p) => [p.a, p.b])])].sort();
  const byPair = new Map(m.pairs.map((p) => [p.a + '|' + p.b, p]));
  const pairOf = (a, b) => byPair.get(a + '|' + b) || byPair.get(b + '|' + a);
  const head = el('tr', {}, el('th', {text: ''}), ...names.map((n) => el('th', {text: n})));
  const rows = names.map((a) => el('tr', {}, el('th', {text: a}), ...names.map((b) => {
    if (a === b) return el('td', {class: 'self', text: '—'});
    const p = pairOf(a, b);
    if (!p) return el('td', {class: 'unmeasured', text: 'not measured'});
    const share = p.class_best_gbps > 0 ? p.measured_gbps / p.class_best_gbps : 1;
    const td = el('td', {class: 'pair' + (p.slow ? ' slow' : '') + (p.stale ? ' stale' : ''),
                         text: gbps(p.measured_gbps)});
    td.dataset.pair = p.a + '|' + p.b;
    td.dataset.slow = String(p.slow);
    if (!p.slow && !p.stale) td.style.background = 'hsl(140, 45%, ' + (92 - 30 * share) + '%)';
    td.title = p.a + ' – ' + p.b + ': ' + gbps(p.measured_gbps) + ' GB/s measured (' + p.method +
        ', ' + Math.round(p.age_s) + ' s ago), nominal ' + gbps(p.nominal_gbps) + ' GB/s (' +
        p.class + '), best of its class ' + gbps(p.class_best_gbps) + ' GB/s' +
        (p.slow ? ': SLOW' : '') + (p.stale ? ': stale, not used' : '');
    return td;
  })));
  $('net-matrix').replaceChildren(el('thead', {}, head), el('tbody', {}, ...rows));
  const pairs = m.pairs.slice().sort((x, y) =>
      (x.class_best_gbps ? x.measured_gbps / x.class_best_gbps : 1) -
      (y.class_best_gbps ? y.measured_gbps / y.class_best_gbps : 1));
  fillTable('net-pairs', pairs.map((p) => [p.a + ' – ' + p.b, gbps(p.measured_gbps),
    gbps(p.forward_gbps) + ' / ' + gbps(p.backward_gbps), gbps(p.nominal_gbps), p.class,
    p.slow ? 'slow' : p.stale ? 'stale' : 'ok', p.method, Math.round(p.age_s) + ' s',
    p.failures]));
  if (pairs.length === 0) fillTable('net-pairs', [['no pair measured yet', '', '', '', '', '', '',
    '', '']]);
  $('net-groups').replaceChildren(...m.groups.map((g, i) =>
      el('li', {text: 'measured leaf ' + (i + 1) + ': ' + g.join(', ')})));
  const pr = m.probes;
  $('net-probes').textContent = (pr.enabled ? 'Probes on' : 'Probes off') + ': ' + pr.done +
      ' done, ' + pr.failed + ' failed, ' + pr.running + ' running' +
      pr.in_flight.map((p) => ' (' + p.a + ' – ' + p.b + ')').join('') + '. Pairs are slow below ' +
      m.config.slow_link_ratio + ' × the best of their class; figures older than ' +
      m.config.measured_ttl_s + ' s are stale.';
}

function currentView() {
  const h = location.hash.replace(/^#/, '');
  if (h.startsWith('job/')) return {name: 'job', id: decodeURIComponent(h.slice(4))};
  return {name: ['queues', 'jobs', 'network'].includes(h) ? h : 'cluster'};
}

async function refresh() {
  clearTimeout(timer);
  const v = currentView();
  for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== 'view-' + v.name;
  try {
    if (v.name === 'cluster') await drawCluster();
    else if (v.name === 'queues') await drawQueues();
    else if (v.name === 'jobs') await drawJobs();
    else if (v.name === 'network') await drawNetwork();
    else await drawJob(v.id);
    $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
    $('status').classList.remove('error');
    document.body.dataset.ready = v.name;
  } catch (e) {
    if (e.message === 'unauthorised') return showLogin('Your session ended: log in again.');
    $('status').textContent = 'could not update: ' + e.message;
    $('status').classList.add('error');
  }
  timer = setTimeout(refresh, kPollMs);
}

async function start() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ''));
  if (params.has('token')) {
    const view = params.get('view') || 'cluster';
    history.replaceState(null, '', '#' + view);  // the token leaves the address bar at once
    try {
      await login(params.get('token'));
    } catch (e) {
      return showLogin(e.message);
    }
  }
  let who;
  try {
    who = await api('/console/session');
  } catch (e) {
    return showLogin('');
  }
  $('login').hidden = true;
  $('nav').hidden = false;
  $('logout').hidden = false;
  $('who').textContent = who.name + ' (' + who.role + ')';
  refresh();
}

$('login-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  try {
    await login($('token').value);
    $('token').value = '';
    start();
  } catch (e) {
    $('login-error').textContent = e.message;
  }
});
$('logout').addEventListener('click', async () => {
  await fetch('/console/logout', {method: 'POST', credentials: 'same-origin'});
  clearTimeout(timer);
  showLogin('Logged out.');
});
$('job-rank').addEventListener('change', refresh);
window.addEventListener('hashchange', refresh);
start();
