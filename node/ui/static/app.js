// Sluice dashboard: plain JavaScript, no framework, no build step.
//
// Reads the node's admin API with the token kept in sessionStorage (this
// tab only): /v1/stats (every 2 s), /v1/members and /v1/hotkeys (every
// 6 s), /v1/rules (every 10 s, not while a rule is being edited); writes
// rules with PUT and DELETE /v1/rules/{name}, If-Match the version read.
// The rule editor offers the algorithms /v1/rules names ("algorithms":
// each one's name, whether it is leased or takes slots, and the fields
// only some algorithms take that apply to it): the node's, not a list of
// its own.
'use strict';

(function () {
  const TOKEN_KEY = 'sluice.adminToken';
  const TICK_MS = 2000;
  const DECISIONS = [
    // stacking order of the chart, bottom first
    { key: 'allowed', cls: 'allowed', label: 'allowed' },
    { key: 'local_fallback', cls: 'local', label: 'allowed locally (Store down)' },
    { key: 'shadow_denied', cls: 'shadow', label: 'shadow denied' },
    { key: 'degraded', cls: 'degraded', label: 'degraded' },
    { key: 'unavailable', cls: 'unavailable', label: 'unavailable' },
    { key: 'denied', cls: 'denied', label: 'denied' },
  ];
  const SVGNS = 'http://www.w3.org/2000/svg';

  const state = {
    token: null,
    running: false,
    paused: false,
    tick: 0,
    refreshes: 0,
    busy: false,
    stats: null,
    members: null,
    hot: null,
    rules: null, // list of rule objects, or null before the first answer
    rulesVersion: null,
    rulesEtag: null,
    rulesSource: '',
    rulesError: '',
    rulesAPI: true, // false when /v1/rules answers 404
    algorithms: [], // the node's algorithms, from /v1/rules
    editing: null, // null: no editor; '': a new rule; else the rule's name
    selected: '', // the chart's rule ('' = all)
    ids: 0, // editor input ids
    rulesShown: '', // what the rules table shows, to skip needless rebuilds
    focusEditor: false,
  };

  // ---- small DOM helpers ----

  function $(id) { return document.getElementById(id); }

  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }

  // fill replaces box's children with kids, leaving out null, undefined
  // and false as el() does (replaceChildren would print them as text).
  function fill(box, ...kids) {
    box.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
  }

  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const kid of kids) if (kid) e.append(kid);
    return e;
  }

  function fmt(n) {
    if (n === undefined || n === null || Number.isNaN(n)) return '–';
    if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + 'M';
    if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + 'k';
    if (Number.isInteger(n)) return n.toLocaleString('en-US');
    return n.toFixed(1);
  }

  function clock(ms) {
    const d = new Date(ms);
    return d.toLocaleTimeString('en-GB', { hour12: false });
  }

  // ---- the API ----

  async function api(method, path, body, headers) {
    const h = { Accept: 'application/json' };
    if (state.token) h.Authorization = 'Bearer ' + state.token;
    if (body !== undefined) h['Content-Type'] = 'application/json';
    Object.assign(h, headers || {});
    let resp;
    try {
      resp = await fetch(path, {
        method, headers: h, cache: 'no-store', credentials: 'omit',
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      return { status: 0, data: null, headers: null, error: 'node unreachable (' + e.message + ')' };
    }
    let data = null;
    const text = await resp.text();
    if (text) {
      try { data = JSON.parse(text); } catch (e) { data = null; }
    }
    let error = null;
    if (!resp.ok) error = (data && data.error) || resp.statusText || ('HTTP ' + resp.status);
    return { status: resp.status, data, headers: resp.headers, error };
  }

  function denied(r) { return r.status === 401 || r.status === 403; }

  // ---- token ----

  function showLogin(message) {
    state.running = false;
    $('app').hidden = true;
    $('logout').hidden = true;
    $('pause').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = message || '';
    $('token').value = '';
    $('token').focus();
  }

  // tryToken opens the dashboard if the node admits token ('' sends
  // none: a node without an admin token admits loopback callers).
  // probing: no token was entered yet, so a refusal just asks for one.
  async function tryToken(token, probing) {
    state.token = token;
    const r = await api('GET', '/v1/stats?scope=node');
    if (denied(r)) {
      sessionStorage.removeItem(TOKEN_KEY);
      state.token = null;
      if (probing) showLogin(r.status === 401 ? '' : r.error);
      else showLogin(r.status === 401 ? 'This node needs its admin token.' : 'The node refused this token.');
      return;
    }
    if (r.status !== 200) {
      showLogin('Cannot reach the admin API: ' + (r.error || 'HTTP ' + r.status));
      return;
    }
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    $('login').hidden = true;
    $('app').hidden = false;
    $('logout').hidden = !token; // nothing to log out of without a token
    $('pause').hidden = false;
    state.stats = r.data;
    state.running = true;
    state.tick = 0;
    renderStats();
    await refresh(true);
  }

  function authLost(r) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    showLogin(r.status === 401 ? 'The node asks for the admin token again.' : 'The node refused the token.');
  }

  // ---- refresh loop ----

  async function refresh(all) {
    if (!state.running || state.busy) return;
    state.busy = true;
    try {
      const jobs = [api('GET', '/v1/stats')];
      const slow = all || state.tick % 3 === 0;
      const rules = (all || state.tick % 5 === 0) && state.editing === null;
      jobs.push(slow ? api('GET', '/v1/members') : null);
      jobs.push(slow ? api('GET', '/v1/hotkeys') : null);
      jobs.push(rules ? api('GET', '/v1/rules') : null);
      const [st, mem, hot, rl] = await Promise.all(jobs);
      for (const r of [st, mem, hot, rl]) {
        if (r && denied(r)) { authLost(r); return; }
      }
      if (st.status === 200) {
        state.stats = st.data;
        setBanner('');
      } else {
        setBanner('Cannot read /v1/stats: ' + st.error);
      }
      if (mem && mem.status === 200) state.members = mem.data;
      if (hot && hot.status === 200) state.hot = hot.data;
      // A read that started before a form opened answers for the rules
      // before the form: applied now, it would rebuild the open form from
      // another admin's write and move its If-Match on, so that Save
      // overwrote that write instead of being refused (412).
      if (rl && state.editing === null) applyRules(rl);
      renderStats();
      if (slow) { renderMembers(); renderHot(); }
      $('updated').textContent = 'updated ' + clock(Date.now());
    } finally {
      state.busy = false;
      // How many refreshes ended: what a test waits on, not a clock.
      document.documentElement.dataset.refreshes = String(++state.refreshes);
    }
  }

  function setBanner(msg) {
    $('banner').textContent = msg;
    $('banner').hidden = !msg;
  }

  function applyRules(r) {
    if (r.status === 404) {
      state.rulesAPI = false;
      state.rulesError = '';
      state.rules = null;
    } else if (r.status === 200 && r.data) {
      state.rulesAPI = true;
      state.rulesError = '';
      state.rules = Array.isArray(r.data.rules) ? r.data.rules : [];
      state.algorithms = Array.isArray(r.data.algorithms) ? r.data.algorithms : [];
      state.rulesVersion = r.data.version;
      state.rulesSource = r.data.source || '';
      state.rulesEtag = (r.headers && r.headers.get('ETag')) || null;
    } else {
      state.rulesError = 'Cannot read /v1/rules: ' + r.error;
    }
    // Rebuild the table only when something changed: a rebuild under the
    // pointer or a click is needless churn.
    const key = JSON.stringify([state.rulesAPI, state.rulesError, state.rulesVersion, state.rulesSource, state.rules, state.algorithms]);
    if (key === state.rulesShown) return;
    renderRules();
  }

  // ---- header pills ----

  function renderHealth() {
    const h = $('health');
    fill(h);
    const s = state.stats;
    if (s && s.store) {
      const b = s.store.breaker;
      const cls = b === 'closed' ? 'ok' : (b === 'open' ? 'bad' : 'warn');
      const text = b === 'closed' ? 'Store healthy' : 'Store breaker ' + b;
      h.append(el('span', { class: 'pill', id: 'pill-store' }, el('i', { class: 'dot ' + cls }), text));
    }
    if (s && s.upstream) {
      const u = s.upstream;
      h.append(el('span', { class: 'pill', id: 'pill-upstream', title: u.error || null },
        el('i', { class: 'dot ' + (!u.reachable ? 'bad' : (u.error ? 'warn' : 'ok')) }),
        u.reachable ? 'Global tier ' + fmt(u.rtt_ms) + ' ms' : 'Global tier unreachable'));
    }
    if (state.members) {
      const ms = state.members.members || [];
      const alive = ms.filter((m) => m.state === 'alive').length;
      const cls = alive === ms.length ? 'ok' : 'warn';
      h.append(el('span', { class: 'pill' }, el('i', { class: 'dot ' + cls }),
        alive + ' of ' + ms.length + (ms.length === 1 ? ' member' : ' members') + ' alive'));
      // A partition: members alive to gossip that do not answer this
      // node's pings, and this node in the minority.
      const silent = ms.filter((m) => m.state === 'alive' && m.answering === false).map((m) => m.name);
      if (silent.length) {
        h.append(el('span', { class: 'pill', id: 'pill-silent', title: 'alive to gossip, but not answering this node: cut off from it, at least one way' },
          el('i', { class: 'dot warn' }), 'not answering: ' + silent.join(', ')));
      }
      const q = state.members.quorum;
      if (q && q.minority) {
        h.append(el('span', { class: 'pill', id: 'pill-minority', title: 'not ready: load balancers drain it; on the memory store each limit is cut to its share' },
          el('i', { class: 'dot bad' }), 'minority: sees ' + q.seen + ' of ' + q.known + ' members'));
      }
    }
    if (state.rules) {
      h.append(el('span', { class: 'pill' }, 'rules v' + state.rulesVersion + (state.rulesSource ? ' · ' + state.rulesSource : '')));
    }
    if (s && s.partial) {
      const missing = (s.nodes || []).filter((n) => !n.ok).map((n) => n.name);
      h.append(el('span', { class: 'pill', id: 'pill-partial', title: (s.nodes || []).filter((n) => !n.ok).map((n) => n.name + ': ' + n.error).join('\n') || null },
        el('i', { class: 'dot warn' }), 'partial: ' + (missing.length ? missing.join(', ') + ' missing' : 'a peer did not answer')));
    }
    $('node-name').textContent = s ? s.self : '';
  }

  // ---- traffic ----

  function ruleRows() { return (state.stats && state.stats.rules) || []; }

  function series(name) {
    const rows = ruleRows().filter((r) => !name || r.rule === name);
    const n = rows.length ? rows[0].allowed.length : 30;
    const out = {};
    for (const d of DECISIONS) {
      out[d.key] = new Array(n).fill(0);
      for (const r of rows) (r[d.key] || []).forEach((v, i) => { out[d.key][i] += v; });
    }
    return out;
  }

  function sum(a, from) { let s = 0; for (let i = from || 0; i < a.length; i++) s += a[i]; return s; }

  function niceMax(v) {
    if (v <= 4) return 4;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function renderChart() {
    const s = state.stats;
    const box = $('chart');
    if (!s) { fill(box); return; }
    const data = series(state.selected);
    const n = data.allowed.length;
    const W = 800, H = 190, ml = 46, mr = 8, mt = 8, mb = 22;
    const totals = data.allowed.map((_, i) => DECISIONS.reduce((a, d) => a + data[d.key][i], 0));
    const max = niceMax(Math.max(0, ...totals));
    const y = (v) => mt + (H - mt - mb) * (1 - v / max);
    const bw = (W - ml - mr) / n;
    const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': 'decisions per 10 seconds' });
    for (const f of [0, 0.5, 1]) {
      const v = max * f;
      g.append(svg('line', { class: 'grid', x1: ml, x2: W - mr, y1: y(v), y2: y(v) }));
      const t = svg('text', { class: 'axis', x: ml - 6, y: y(v) + 4, 'text-anchor': 'end' });
      t.textContent = fmt(v);
      g.append(t);
    }
    for (let i = 0; i < n; i++) {
      let acc = 0;
      const start = s.start_ms + i * s.bucket_ms;
      const parts = [];
      for (const d of DECISIONS) {
        const v = data[d.key][i];
        if (v > 0) {
          const r = svg('rect', {
            class: 'bar ' + d.cls + (i === n - 1 ? ' partial' : ''),
            x: (ml + i * bw + 1).toFixed(1), width: Math.max(1, bw - 2).toFixed(1),
            y: y(acc + v).toFixed(1), height: Math.max(0.5, y(acc) - y(acc + v)).toFixed(1),
          });
          g.append(r);
          acc += v;
        }
        parts.push(d.label + ' ' + v);
      }
      const hit = svg('rect', { x: ml + i * bw, y: mt, width: bw, height: H - mt - mb, fill: 'transparent' });
      const title = svg('title');
      title.textContent = clock(start) + (i === n - 1 ? ' (now, partial)' : '') + '\n' + parts.join(', ');
      hit.append(title);
      g.append(hit);
    }
    for (let i = 0; i < n; i += 6) {
      const t = svg('text', { class: 'axis', x: ml + i * bw + 2, y: H - 6 });
      const mins = Math.round((n - i) * s.bucket_ms / 60000);
      t.textContent = '−' + mins + ' min';
      g.append(t);
    }
    const now = svg('text', { class: 'axis', x: W - mr, y: H - 6, 'text-anchor': 'end' });
    now.textContent = 'now';
    g.append(now);
    fill(box, g);

    // totals: the last minute (6 buckets, the current one partial) and 5 minutes
    const last = Math.max(0, n - 6);
    const a1 = sum(data.allowed, last), d1 = sum(data.denied, last);
    const all5 = DECISIONS.reduce((a, x) => a + sum(data[x.key]), 0);
    const other1 = sum(data.degraded, last) + sum(data.unavailable, last) + sum(data.local_fallback, last);
    const pct = (d, a) => (a + d) ? (100 * d / (a + d)).toFixed(1) + '%' : '–';
    fill($('totals'),
      el('div', null, el('b', { id: 'total-allowed', text: fmt(a1) }), el('span', { text: 'allowed, last minute' })),
      el('div', null, el('b', { id: 'total-denied', text: fmt(d1) }), el('span', { text: '429s, last minute' })),
      el('div', null, el('b', { text: pct(d1, a1) }), el('span', { text: 'denied share' })),
      el('div', null, el('b', { text: fmt(other1) }), el('span', { text: 'Store down, last minute', title: 'allowed locally, degraded or 503 while the Store was unreachable' })),
      el('div', null, el('b', { id: 'total-5m', text: fmt(all5) }), el('span', { text: 'decisions, 5 minutes' })),
    );
  }

  function renderRuleSelect() {
    const sel = $('chart-rule');
    const names = ruleRows().map((r) => r.rule);
    const have = Array.from(sel.options).slice(1).map((o) => o.value);
    if (names.join('\u0000') === have.join('\u0000')) return;
    fill(sel, el('option', { value: '' }, 'All rules'), ...names.map((n) => el('option', { value: n }, n)));
    if (state.selected && !names.includes(state.selected)) state.selected = '';
    sel.value = state.selected;
  }

  function sparkline(name) {
    const d = series(name);
    const n = d.allowed.length;
    const W = 120, H = 26;
    const tot = d.allowed.map((_, i) => DECISIONS.reduce((a, x) => a + d[x.key][i], 0));
    const max = Math.max(1, ...tot);
    const bw = W / n;
    const g = svg('svg', { class: 'spark', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', 'aria-hidden': 'true' });
    for (let i = 0; i < n; i++) {
      // bottom up: let through, shadow denied (let through too), denied
      const shadow = d.shadow_denied[i], bad = d.denied[i];
      let y = H;
      for (const [cls, v] of [['allowed', tot[i] - bad - shadow], ['shadow', shadow], ['denied', bad]]) {
        if (v <= 0) continue;
        const h = H * v / max;
        y -= h;
        g.append(svg('rect', { class: 'bar ' + cls, x: (i * bw).toFixed(1), width: Math.max(1, bw - 1).toFixed(1), y: y.toFixed(1), height: h.toFixed(1) }));
      }
    }
    return g;
  }

  function renderStats() {
    renderHealth();
    renderRuleSelect();
    renderChart();
    renderStore();
    updateRuleTraffic();
  }

  // ---- Store and members ----

  function renderStore() {
    const s = state.stats;
    const box = $('store');
    if (!s || !s.store) { fill(box, el('p', { class: 'empty', text: 'No data yet.' })); return; }
    const st = s.store;
    const cls = st.breaker === 'closed' ? 'ok' : (st.breaker === 'open' ? 'bad' : 'warn');
    const words = { closed: 'Store calls go through', open: 'Store unreachable: rules follow on_store_failure', 'half-open': 'probing the Store' };
    fill(box,
      el('div', { class: 'breaker', id: 'breaker' }, el('i', { class: 'dot ' + cls }), 'Breaker ' + st.breaker,
        el('span', { class: 'muted', text: words[st.breaker] || '' })),
      el('h3', { text: 'This node' }),
      el('div', { class: 'kv' },
        el('span', { text: 'Active keys' }), el('span', { text: fmt(st.active_keys) }),
        // On the in-memory store every check is decided in it: nothing
        // is leased, so the lease rows would only say 0.
        ...(st.in_store ? [
          el('span', { text: 'Checks decided in the memory store' }), el('span', { text: fmt(st.store_decisions) }),
        ] : [
          el('span', { text: 'Checks that waited for the Store' }), el('span', { text: fmt(st.store_decisions) }),
          el('span', { text: 'Lease calls (sync + prefetch)' }), el('span', { text: fmt(st.leases + st.prefetches) }),
          el('span', { text: 'Tokens leased / returned' }), el('span', { text: fmt(st.tokens_leased) + ' / ' + fmt(st.tokens_returned) }),
        ]),
        el('span', { text: 'Degraded decisions' }), el('span', { text: fmt(st.degraded_decisions) }),
      ),
      s.upstream ? el('h3', { text: 'Global tier' }) : null,
      s.upstream ? renderUpstream(s) : null,
      el('h3', { text: 'Where the tokens are' }),
      renderTokens(s),
      el('h3', { text: 'Gateways' }),
      renderHolders(s),
    );
  }

  // "1 key", "2 keys": a count with its noun.
  function plural(n, noun) {
    return fmt(n) + ' ' + noun + (n === 1 ? '' : 's');
  }

  // Where each rule's tokens are now (/v1/stats "tokens", summed over the
  // nodes): the Store's remaining of the keys held or lent, what the
  // nodes hold, what they lend gateways and regions, and the bound that
  // puts on how far admissions could fall short if every holder vanished.
  function renderTokens(s) {
    const ts = s.tokens || {};
    const rules = Object.keys(ts).sort();
    if (!rules.length) {
      return el('p', { class: 'empty', id: 'tokens', text: 'No tokens held or lent by these nodes.' });
    }
    const num = (v) => el('td', { class: 'num', text: fmt(v || 0) });
    return el('div', { id: 'tokens' },
      el('table', { class: 'tokens' },
        el('thead', null, el('tr', null, el('th', { text: 'Rule' }),
          el('th', { class: 'num', text: 'Store', title: 'tokens left in the Store of the keys held or lent' }),
          el('th', { class: 'num', text: 'Nodes', title: 'tokens the nodes hold' }),
          el('th', { class: 'num', text: 'Gate\u00adways', title: 'tokens lent to gateways' }),
          el('th', { class: 'num', text: 'Re\u00adgions', title: 'tokens lent to regions' }),
          el('th', { class: 'num', text: 'Short by', title: 'could fall short by: tokens lent now, stranded until their loans end if every holder vanished' }))),
        el('tbody', null, rules.map((r) => {
          const t = ts[r];
          return el('tr', { class: 'tokens-row', 'data-rule': r }, el('td', { class: 'rule', text: r, title: r }),
            num(t.store), num(t.nodes), num(t.gateways), num(t.regions), num(t.short_bound));
        }))),
      el('p', { class: 'muted', text: 'The Store as of each key\'s last call; ' + plural(rules.reduce((n, r) => n + (ts[r].keys || 0), 0), 'key') + ' held or lent.' }));
  }

  // The global tier this region's nodes lease global rules from
  // (sluiced -upstream): reachable or not and why, the round trip, and
  // the tokens the nodes hold of each global rule.
  function renderUpstream(s) {
    const u = s.upstream;
    const lent = u.lent || {};
    const rules = Object.keys(lent).sort();
    const nodes = ((s.nodes || []).filter((n) => n.upstream));
    return el('div', { id: 'upstream' },
      el('div', { class: 'breaker', id: 'upstream-state' },
        el('i', { class: 'dot ' + (!u.reachable ? 'bad' : (u.error ? 'warn' : 'ok')) }),
        u.reachable ? 'Reachable' : 'Unreachable',
        el('span', { class: 'muted', text: u.reachable && !u.error ? 'global rules lease from it' : 'global rules decide from the tokens held, then by on_store_failure' })),
      u.error ? el('p', { class: 'error', id: 'upstream-error', text: u.error }) : null,
      el('div', { class: 'kv' },
        el('span', { text: 'Nodes' }), el('span', { class: 'key', id: 'upstream-urls', text: (u.urls || []).join(', ') }),
        el('span', { text: nodes.length > 1 ? 'Round trip (slowest node)' : 'Round trip' }), el('span', { id: 'upstream-rtt', text: fmt(u.rtt_ms) + ' ms' }),
        el('span', { text: 'Global keys held' }), el('span', { text: fmt(u.keys) }),
      ),
      rules.length ? el('table', { id: 'upstream-rules' },
        el('thead', null, el('tr', null, el('th', { text: 'Global rule' }), el('th', { class: 'num', text: 'Tokens held' }))),
        el('tbody', null, rules.map((r) => el('tr', { class: 'upstream-row', 'data-rule': r },
          el('td', { text: r }), el('td', { class: 'num held', text: fmt(lent[r]) }))))) :
        el('p', { class: 'empty', id: 'upstream-rules', text: 'No tokens of global rules held.' }),
      nodes.length > 1 ? el('p', { class: 'muted' }, nodes.map((n) => n.name + ': ' +
        (n.upstream.reachable ? fmt(n.upstream.rtt_ms) + ' ms' : 'unreachable')).join(' · ')) : null);
  }

  // The gateways the nodes lend to (the lease protocol), the most lent
  // first, with what each holds by rule.
  function renderHolders(s) {
    const hs = s.gateway_holders || [];
    if (!hs.length) {
      return el('p', { class: 'empty', id: 'holders', text: 'No gateway holds tokens lent by these nodes.' });
    }
    const byRule = (h) => Object.keys(h.rules || {}).sort().map((r) => r + ' ' + fmt(h.rules[r])).join(', ');
    const rows = hs.map((h) => el('tr', {
      class: 'holder-row', 'data-holder': h.holder,
      title: h.holder + ': ' + fmt(h.keys) + ' keys, loan ends ' + (h.until_ms ? clock(h.until_ms) : '–'),
    },
    el('td', null, el('span', { class: 'key', text: h.holder.slice(0, 8) + (h.holder.length > 8 ? '…' : '') }),
      el('div', { class: 'muted', text: 'from ' + h.node })),
    el('td', { class: 'num', text: fmt(h.lent) }),
    el('td', { class: 'holder-rules', text: byRule(h) })));
    return el('div', { id: 'holders' },
      el('table', null,
        el('thead', null, el('tr', null, el('th', { text: 'Holder' }),
          el('th', { class: 'num', text: 'Tokens lent' }), el('th', { text: 'By rule' }))),
        el('tbody', null, rows)),
      s.gateway_holders_more ? el('p', { class: 'muted', text: 'and ' + fmt(s.gateway_holders_more) + ' more' }) : null);
  }

  function renderMembers() {
    const box = $('members');
    const m = state.members;
    renderHealth();
    if (!m) { fill(box, el('p', { class: 'empty', text: 'No data yet.' })); return; }
    const nodes = {};
    for (const n of (state.stats && state.stats.nodes) || []) nodes[n.name] = n;
    const rows = (m.members || []).map((x) => {
      const n = nodes[x.name];
      const silent = x.state === 'alive' && x.answering === false;
      const cls = silent ? 'warn' : (x.state === 'alive' ? 'ok' : (x.state === 'left' ? 'warn' : 'bad'));
      let store = '–';
      if (n && n.ok && n.store) store = n.store.breaker;
      else if (n && !n.ok) store = 'no answer';
      return el('tr', null,
        el('td', { class: 'nowrap' }, x.name, x.name === m.self ? el('span', { class: 'muted', text: ' (here)' }) : null),
        el('td', { class: 'key', text: x.http_addr || '–' }),
        el('td', null, el('span', { class: 'state' }, el('i', { class: 'dot ' + cls }), silent ? 'alive, not answering' : x.state)),
        el('td', { text: store, title: n && n.error ? n.error : null }),
      );
    });
    fill(box, el('table', null,
      el('thead', null, el('tr', null, el('th', { text: 'Name' }), el('th', { text: 'HTTP' }), el('th', { text: 'State' }), el('th', { text: 'Store' }))),
      el('tbody', null, rows)));
  }

  // ---- hot keys ----

  function renderHot() {
    const box = $('hotkeys');
    const h = state.hot;
    if (!h) { fill(box, el('p', { class: 'empty', text: 'No data yet.' })); return; }
    const single = state.members && (state.members.members || []).length <= 1;
    const top = (h.top || []).slice(0, 10);
    const parts = [];
    parts.push(el('div', { class: 'kv' }, el('span', { text: 'Checks/s served by this node' }), el('span', { text: fmt(h.node_rate) })));
    parts.push(el('h3', { text: 'Top keys' }));
    if (!top.length) {
      parts.push(el('p', { class: 'empty', text: single ? 'Hot keys are tracked in a cluster; this node runs alone.' : 'No hot keys.' }));
    } else {
      parts.push(el('table', null,
        el('thead', null, el('tr', null, el('th', { text: 'Key (rule:key)' }), el('th', { class: 'num', text: 'Checks/s' }), el('th', { text: 'Split' }))),
        el('tbody', null, top.map((k) => el('tr', null,
          el('td', { class: 'key', text: k.key, title: k.key }),
          el('td', { class: 'num', text: fmt(k.rate) }),
          el('td', { text: k.split ? (k.holders || []).length + ' holders' : '–' }))))));
    }
    parts.push(el('h3', { text: 'Current splits' }));
    const splits = h.splits || [];
    if (!splits.length) {
      parts.push(el('p', { class: 'empty', text: 'No key is split.' }));
    } else {
      parts.push(el('table', null,
        el('thead', null, el('tr', null, el('th', { text: 'Key' }), el('th', { text: 'Holders' }), el('th', { text: 'Owner' }))),
        el('tbody', null, splits.map((p) => el('tr', null,
          el('td', { class: 'key', text: p.key, title: p.key }),
          el('td', { text: (p.holders || []).join(', ') }),
          el('td', { text: p.owner }))))));
    }
    fill(box, ...parts);
  }

  // ---- rules ----

  function perMinute(a) {
    // the last minute: the last 6 buckets, the current one included
    return sum(a, Math.max(0, a.length - 6));
  }

  // algorithm is the node's description of the algorithm named name, or
  // undefined.
  function algorithm(name) { return state.algorithms.find((a) => a.name === name); }

  function limitText(r) {
    if (r.limit === undefined) return '–';
    const a = algorithm(r.algorithm);
    let t = fmt(r.limit) + (a && a.slots ? ' in flight' : ' / ' + (r.period || '?'));
    if (r.burst) t += ', burst ' + fmt(r.burst);
    return t;
  }

  function renderRules() {
    state.rulesShown = JSON.stringify([state.rulesAPI, state.rulesError, state.rulesVersion, state.rulesSource, state.rules, state.algorithms]);
    renderHealth();
    const box = $('rules');
    const note = $('rules-note');
    const writable = state.rulesAPI && state.rules !== null && state.rulesSource !== 'file';
    $('new-rule').hidden = !writable || state.editing !== null;
    $('rules-meta').textContent = state.rules ? 'version ' + state.rulesVersion + (state.rulesSource ? ', source ' + state.rulesSource : '') : '';
    let msg = '';
    if (!state.rulesAPI) msg = 'This node has no rules admin API (/v1/rules answers 404): the rules are listed from their live figures only.';
    else if (state.rulesError) msg = state.rulesError;
    else if (state.rulesSource === 'file') msg = 'Rules come from a file on this node (GitOps): change the file; the admin API is read-only.';
    note.textContent = msg;
    note.hidden = !msg;

    let list = state.rules;
    if (!list) list = ruleRows().map((r) => ({ name: r.rule }));
    const body = [];
    if (state.editing === '') body.push(editorRow(null, writable));
    for (const r of list) {
      const tr = el('tr', { class: 'rule-row' + (state.selected === r.name ? ' selected' : ''), 'data-rule': r.name, onclick: () => selectRule(r.name) },
        el('td', null, el('div', { class: 'rule-name' }, r.name, r.shadow ? el('span', { class: 'tag shadow', text: 'shadow' }) : null),
          r.algorithm ? el('div', { class: 'algo', text: r.algorithm }) : null),
        el('td', { class: 'limit', text: limitText(r) }),
        el('td', { class: 'key', text: r.key || r.descriptor || '–', title: r.key || null }),
        el('td', { class: 'spark-cell' }),
        el('td', { class: 'num allowed-min' }),
        el('td', { class: 'num denied-min' }),
        el('td', { class: 'num' }, writable && state.editing === null
          ? el('button', { type: 'button', class: 'small edit', 'data-edit': r.name, onclick: (e) => { e.stopPropagation(); openEditor(r.name); } }, 'Edit')
          : null),
      );
      body.push(tr);
      if (state.editing === r.name) body.push(editorRow(r, writable));
    }
    if (!body.length) body.push(el('tr', null, el('td', { colspan: 7, class: 'empty', text: 'No rules.' })));
    fill(box, el('table', { id: 'rules-table' },
      el('thead', null, el('tr', null,
        el('th', { text: 'Rule' }), el('th', { text: 'Limit' }), el('th', { text: 'Key' }),
        el('th', { text: 'Last 5 min' }), el('th', { class: 'num', text: 'Allowed/min', title: 'allowed in the last minute' }), el('th', { class: 'num', text: 'Denied/min', title: 'denied (429) in the last minute; for a shadow rule, the requests it would have denied (let through)' }), el('th'))),
      el('tbody', null, body)));
    updateRuleTraffic();
    const first = box.querySelector('.editor input:not([readonly]), .editor select');
    if (first && state.focusEditor) { first.focus(); state.focusEditor = false; }
  }

  function updateRuleTraffic() {
    const rows = {};
    for (const r of ruleRows()) rows[r.rule] = r;
    for (const tr of document.querySelectorAll('#rules-table tr.rule-row')) {
      const r = rows[tr.dataset.rule];
      const spark = tr.querySelector('.spark-cell');
      fill(spark, r ? sparkline(r.rule) : '');
      tr.querySelector('.allowed-min').textContent = r ? fmt(perMinute(r.allowed)) : '–';
      fill(tr.querySelector('.denied-min'), ...(r ? deniedCell(r) : ['–']));
    }
  }

  // deniedCell is a row's denials in the last minute: the 429s, and what
  // the rule denied in shadow mode (counted apart: those requests went
  // through).
  function deniedCell(r) {
    const bad = perMinute(r.denied), shadow = perMinute(r.shadow_denied || []);
    const out = [];
    if (bad > 0 || shadow === 0) out.push(fmt(bad));
    if (shadow > 0) out.push(el('span', { class: 'shadow-count', title: 'would have been denied (shadow)', text: (out.length ? ' + ' : '') + fmt(shadow) + ' shadow' }));
    return out;
  }

  function selectRule(name) { setSelected(state.selected === name ? '' : name); }

  function setSelected(name) {
    state.selected = name;
    $('chart-rule').value = state.selected;
    for (const tr of document.querySelectorAll('#rules-table tr.rule-row')) {
      tr.classList.toggle('selected', tr.dataset.rule === state.selected);
    }
    renderChart();
  }

  // ---- the editor ----

  function getPath(obj, path) {
    let v = obj;
    for (const p of path.split('.')) { if (v === null || v === undefined) return undefined; v = v[p]; }
    return v;
  }

  function setPath(obj, path, v) {
    const parts = path.split('.');
    let o = obj;
    for (let i = 0; i < parts.length - 1; i++) {
      if (typeof o[parts[i]] !== 'object' || o[parts[i]] === null) o[parts[i]] = {};
      o = o[parts[i]];
    }
    const last = parts[parts.length - 1];
    if (v === undefined) delete o[last]; else o[last] = v;
  }

  // algorithmOptions fills the editor's algorithm choices with the node's
  // algorithms (and the rule's own, if the node does not name it).
  function algorithmOptions(form, current) {
    const sel = form.querySelector('select[data-field="algorithm"]');
    const names = state.algorithms.map((a) => a.name);
    if (current && !names.includes(current)) names.push(current);
    fill(sel, ...names.map((n) => el('option', { value: n, text: n })));
    sel.addEventListener('change', () => showFields(form));
  }

  // showFields shows the fields only some algorithms take (any
  // algorithm's "fields") for the chosen algorithm alone; a hidden one is
  // not sent.
  function showFields(form) {
    const a = algorithm(form.querySelector('select[data-field="algorithm"]').value);
    const some = new Set(state.algorithms.flatMap((x) => x.fields || []));
    for (const input of form.querySelectorAll('[data-field]')) {
      const f = input.dataset.field;
      if (!some.has(f)) continue;
      input.closest('.field').hidden = !!a && !(a.fields || []).includes(f);
    }
  }

  function editorRow(rule, writable) {
    const form = $('editor-tpl').content.firstElementChild.cloneNode(true);
    const isNew = rule === null;
    const first = state.algorithms.length ? state.algorithms[0].name : undefined;
    const r = rule || { algorithm: first, period: '1m' };
    algorithmOptions(form, r.algorithm);
    for (const input of form.querySelectorAll('[data-field]')) {
      const f = input.dataset.field;
      const v = getPath(r, f);
      if (input.type === 'checkbox') { input.checked = !!v; continue; }
      if (v === undefined || v === null) { input.value = ''; continue; }
      if (input.dataset.type === 'list') input.value = Array.isArray(v) ? v.join(', ') : String(v);
      else if (input.dataset.type === 'json') input.value = (Array.isArray(v) && v.length === 0) ? '' : JSON.stringify(v);
      else input.value = String(v);
      input.addEventListener('input', () => clearFieldError(form, f));
    }
    for (const div of form.querySelectorAll('.field')) {
      const input = div.querySelector('[data-field]');
      const label = div.querySelector('label');
      if (input && label && input.type !== 'checkbox') {
        input.id = 'edit-' + (++state.ids);
        label.htmlFor = input.id;
      }
    }
    const name = form.querySelector('[data-field="name"]');
    if (!isNew) name.readOnly = true;
    form.querySelector('.delete').hidden = isNew;
    form.addEventListener('submit', (e) => { e.preventDefault(); save(form, rule); });
    form.querySelector('.cancel').addEventListener('click', closeEditor);
    form.querySelector('.delete').addEventListener('click', (e) => remove(e.currentTarget, form, rule));
    if (!writable) for (const b of form.querySelectorAll('button.save, button.delete')) b.disabled = true;
    showFields(form);
    return el('tr', { class: 'editor-row' }, el('td', { colspan: 7 }, form));
  }

  function openEditor(name) {
    state.editing = name;
    state.focusEditor = true;
    renderRules();
  }

  function closeEditor() {
    state.editing = null;
    renderRules();
    refresh(true);
  }

  function clearFieldError(form, f) {
    const span = form.querySelector(`[data-error="${CSS.escape(f)}"]`);
    if (span) { span.textContent = ''; span.closest('.field').classList.remove('invalid'); }
  }

  function clearErrors(form) {
    for (const s of form.querySelectorAll('.field-error')) s.textContent = '';
    for (const f of form.querySelectorAll('.field.invalid')) f.classList.remove('invalid');
    form.querySelector('.form-error').textContent = '';
  }

  // errorSpan finds the inline place of a server's error field: the field
  // itself ("limit", "hot.threshold"), without a prefix naming the rule
  // ("rules[0].limit", "per-key.limit"), or its first part
  // ("overrides[1].limit" → "overrides").
  function errorSpan(form, field, ruleName) {
    if (!field) return null;
    let f = String(field).replace(/^rules\[\d+\]\./, '').replace(/^rule\./, '');
    if (ruleName && f.startsWith(ruleName + '.')) f = f.slice(ruleName.length + 1);
    const cands = [f, f.replace(/\[\d+\]/g, ''), f.split(/[.[]/)[0]];
    for (const c of cands) {
      const span = form.querySelector(`[data-error="${CSS.escape(c)}"]`);
      if (span) return span;
    }
    return null;
  }

  function showFieldError(form, span, msg) {
    span.textContent = msg;
    span.closest('.field').classList.add('invalid');
  }

  // collect builds the rule to PUT: the rule as read (fields the form does
  // not show are kept) with the form's fields. Returns null when a field
  // cannot be sent (its error is shown).
  function collect(form, rule) {
    const out = rule ? JSON.parse(JSON.stringify(rule)) : {};
    let ok = true;
    for (const input of form.querySelectorAll('[data-field]')) {
      const f = input.dataset.field;
      const span = form.querySelector(`[data-error="${CSS.escape(f)}"]`);
      let v;
      if (input.closest('.field').hidden) {
        v = undefined; // a field the chosen algorithm does not take
      } else if (input.type === 'checkbox') {
        v = input.checked ? true : undefined;
      } else {
        const s = input.value.trim();
        if (s === '') v = undefined;
        else if (input.dataset.type === 'int') {
          if (!/^[+-]?\d+$/.test(s)) { showFieldError(form, span, 'must be a whole number'); ok = false; continue; }
          v = Number(s);
        } else if (input.dataset.type === 'num') {
          if (!Number.isFinite(Number(s))) { showFieldError(form, span, 'must be a number'); ok = false; continue; }
          v = Number(s);
        } else if (input.dataset.type === 'list') {
          v = s.split(',').map((x) => x.trim()).filter(Boolean);
        } else if (input.dataset.type === 'json') {
          try { v = JSON.parse(s); } catch (e) { showFieldError(form, span, 'not valid JSON: ' + e.message); ok = false; continue; }
        } else v = s;
      }
      setPath(out, f, v);
    }
    for (const k of ['match', 'hot']) {
      if (out[k] && typeof out[k] === 'object' && Object.keys(out[k]).length === 0) delete out[k];
    }
    return ok ? out : null;
  }

  function ifMatch() {
    if (state.rulesEtag) return { 'If-Match': state.rulesEtag };
    if (state.rulesVersion !== null && state.rulesVersion !== undefined) return { 'If-Match': '"' + state.rulesVersion + '"' };
    return {};
  }

  async function save(form, rule) {
    clearErrors(form);
    const body = collect(form, rule);
    if (!body) return;
    const name = body.name || '';
    if (!name) { showFieldError(form, form.querySelector('[data-error="name"]'), 'a rule needs a name'); return; }
    const btn = form.querySelector('.save');
    btn.disabled = true;
    const r = await api('PUT', '/v1/rules/' + encodeURIComponent(name), body, ifMatch());
    btn.disabled = false;
    if (denied(r)) { authLost(r); return; }
    if (r.status >= 200 && r.status < 300) {
      state.editing = null;
      flash('Saved ' + name + (r.data && r.data.version !== undefined ? ' (version ' + r.data.version + ')' : ''));
      await reloadRules();
      return;
    }
    await answerError(form, r, name);
  }

  async function remove(btn, form, rule) {
    if (!btn.dataset.armed) {
      btn.dataset.armed = '1';
      btn.textContent = 'Click again to delete ' + rule.name;
      return;
    }
    clearErrors(form);
    const r = await api('DELETE', '/v1/rules/' + encodeURIComponent(rule.name), undefined, ifMatch());
    if (denied(r)) { authLost(r); return; }
    if (r.status >= 200 && r.status < 300) {
      state.editing = null;
      flash('Deleted ' + rule.name);
      await reloadRules();
      return;
    }
    await answerError(form, r, rule.name);
  }

  async function answerError(form, r, name) {
    const f = r.data && r.data.field;
    const span = r.status === 400 ? errorSpan(form, f, name) : null;
    if (span) {
      // "rule \"demo\": limit: must be > 0" next to the limit field: "must be > 0"
      let m = String(r.error).replace(/^rule "[^"]*": /, '');
      if (f && m.startsWith(f + ': ')) m = m.slice(f.length + 2);
      showFieldError(form, span, m);
      const input = span.closest('.field').querySelector('input, select, textarea');
      if (input) input.focus();
      return;
    }
    let msg = r.error || ('HTTP ' + r.status);
    if (r.status === 412) {
      // Read the new version first, so that the next Save can succeed.
      await refreshVersion();
      msg = 'The rules changed since they were read (now version ' + state.rulesVersion +
        '): the form keeps your values; review them and save again.';
    } else if (f) {
      msg += ' (' + f + ')';
    }
    form.querySelector('.form-error').textContent = msg;
  }

  async function refreshVersion() {
    const r = await api('GET', '/v1/rules');
    if (r.status === 200 && r.data) {
      state.rulesVersion = r.data.version;
      state.rulesEtag = (r.headers && r.headers.get('ETag')) || null;
    }
  }

  async function reloadRules() {
    const r = await api('GET', '/v1/rules');
    if (denied(r)) { authLost(r); return; }
    applyRules(r);
  }

  function flash(msg) {
    const meta = $('rules-meta');
    const t = el('span', { class: 'toast', id: 'toast', text: ' ' + msg });
    const old = $('toast');
    if (old) old.remove();
    meta.after(t);
    setTimeout(() => { t.remove(); }, 4000);
  }

  // ---- start ----

  function start() {
    $('login-form').addEventListener('submit', (e) => {
      e.preventDefault();
      tryToken($('token').value.trim());
    });
    $('logout').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      state.token = null;
      showLogin('');
    });
    $('pause').addEventListener('click', () => {
      state.paused = !state.paused;
      $('pause').textContent = state.paused ? 'Resume' : 'Pause';
    });
    $('chart-rule').addEventListener('change', (e) => setSelected(e.target.value));
    $('new-rule').addEventListener('click', () => openEditor(''));
    setInterval(() => {
      if (!state.running || state.paused || document.hidden) return;
      state.tick++;
      refresh(false);
    }, TICK_MS);
    // Without a saved token, ask the node without one first: a node with no
    // admin token opens at once, on loopback, with no prompt.
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved === null) tryToken('', true);
    else tryToken(saved);
  }

  start();
})();
