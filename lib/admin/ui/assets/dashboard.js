/* global document, window, fetch, URL, URLSearchParams */
// The outbox operations console. Plain browser JavaScript, no library, no build step.
//
// Safe by construction: every value from the server reaches the page as text, through
// textContent or createTextNode (never through the HTML parser), and attributes are set only from
// a fixed list of names. State changes are POSTs to the admin API, which validates them as it
// does any client's.
(function () {
  'use strict';

  const SVG = 'http://www.w3.org/2000/svg';
  const $ = (id) => document.getElementById(id);
  const FILTER_FIELDS = ['type', 'handler', 'key', 'errorName', 'fingerprint', 'failedBefore'];
  const DELIVERY_FIELDS = ['type', 'handler'];
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  /** How often a followed replay is read again, and for how long at most. */
  const FOLLOW_EVERY_MS = 1000;
  const FOLLOW_FOR_MS = 10 * 60 * 1000;
  // Attributes the page ever sets; anything else (style, on*, href from data) is refused.
  const ATTRIBUTES = new Set([
    'class',
    'type',
    'href',
    'title',
    'tabindex',
    'role',
    'aria-label',
    'data-id',
    'data-state',
    'x',
    'y',
    'width',
    'height',
    'viewBox',
    'rx',
    'text-anchor',
    'dominant-baseline',
    'x1',
    'y1',
    'x2',
    'y2',
  ]);

  /** An element with attributes and text or element children; strings become text nodes. */
  function el(tag, attributes, ...children) {
    return build(document.createElement(tag), attributes, children);
  }

  function svg(tag, attributes, ...children) {
    return build(document.createElementNS(SVG, tag), attributes, children);
  }

  function build(node, attributes, children) {
    for (const [name, value] of Object.entries(attributes || {})) {
      if (!ATTRIBUTES.has(name)) throw new Error('attribute not allowed: ' + name);
      node.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === 'object' ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  /**
   * Call before emptying a table body that is drawn again (a live refresh): returns a function
   * that gives keyboard focus back to the same row, or its checkbox, by `data-id`, so a refresh
   * does not take the focus from under a keyboard user (Enter would then open nothing).
   */
  function focusKeeper(body) {
    const focused = document.activeElement;
    const holder = focused && body.contains(focused) ? focused.closest('[data-id]') : null;
    if (!holder) return () => undefined;
    const id = holder.getAttribute('data-id');
    const onBox = focused.tagName === 'INPUT';
    return () => {
      for (const row of body.rows) {
        if (row.getAttribute('data-id') !== id) continue;
        const target = (onBox && row.querySelector('input')) || row;
        target.focus({ preventScroll: true });
        return;
      }
    };
  }

  function setText(id, value) {
    $(id).textContent = value === null || value === undefined ? '–' : String(value);
  }

  /** Resolves after `ms`; the only timer of the page, always with a function. */
  function sleep(ms) {
    return new Promise((resolve) => window.setTimeout(resolve, ms));
  }

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, title, messages) {
      super(title);
      this.status = status;
      this.title = title;
      this.messages = messages;
    }
  }

  /** URL of an admin route: the page is `<path>/ui`, the API is `<path>/...`. */
  function apiUrl(route, query) {
    const url = new URL(route, document.baseURI);
    if (query) url.search = query.toString();
    return url;
  }

  let pending = 0;
  async function call(method, route, { query, body } = {}) {
    const init = {
      method,
      headers: { accept: 'application/json' },
      credentials: 'same-origin',
      cache: 'no-store',
      // A proxy sending the call to a sign-in page is reported, not followed.
      redirect: 'manual',
    };
    if (body !== undefined) {
      init.headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    pending += 1;
    $('busy').hidden = false;
    try {
      let response;
      try {
        response = await fetch(apiUrl(route, query), init);
      } catch (error) {
        throw new ApiError(0, 'The server could not be reached', [String(error.message || error)]);
      }
      if (response.type === 'opaqueredirect') {
        throw new ApiError(0, 'The request was redirected', [
          'Your sign-in may have expired: reload the page.',
        ]);
      }
      const text = await response.text();
      let data = null;
      try {
        data = text ? JSON.parse(text) : null;
      } catch {
        data = null;
      }
      if (!response.ok) {
        const title = response.status + ' ' + ((data && data.error) || response.statusText || '');
        const message = data && data.message !== undefined ? data.message : text.slice(0, 500);
        const messages = (Array.isArray(message) ? message : [message]).map(String);
        throw new ApiError(response.status, title.trim(), messages.filter(Boolean));
      }
      return data;
    } finally {
      pending -= 1;
      $('busy').hidden = pending === 0;
    }
  }

  function queryOf(filter, fields) {
    const query = new URLSearchParams();
    for (const field of fields) if (filter[field] !== undefined) query.set(field, filter[field]);
    return query;
  }

  // ---------------------------------------------------------------- messages

  function showError(error) {
    const api = error instanceof ApiError;
    $('alert-title').textContent = api ? error.title : 'Error';
    const list = $('alert-messages');
    clear(list);
    const messages = api ? error.messages : [String((error && error.message) || error)];
    for (const message of messages) list.appendChild(el('li', null, message));
    if (api && error.status === 403) {
      list.appendChild(el('li', null, 'A guard refused the request: check your credentials.'));
    }
    $('alert').hidden = false;
    $('notice').hidden = true;
  }

  function clearError() {
    $('alert').hidden = true;
  }

  function notify(text) {
    $('notice').textContent = text;
    $('notice').hidden = false;
  }

  let settled = 0;
  let acting = 0;
  /**
   * Runs an action, showing its error instead of throwing. `data-settled` on <body> counts the
   * actions finished and `data-acting` is there while one runs, so a script (or a test) driving
   * the page knows when every action it started, and any live refresh beside it, is done.
   */
  async function guarded(action) {
    acting += 1;
    document.body.dataset.acting = '';
    try {
      clearError();
      await action();
    } catch (error) {
      showError(error);
    } finally {
      acting -= 1;
      if (acting === 0) delete document.body.dataset.acting;
      settled += 1;
      document.body.dataset.settled = String(settled);
    }
  }

  const latestLoads = {};
  /**
   * Starts a load of `view` and answers whether it is still the latest one. A load that answers
   * after a newer one started (a live refresh overtaken by a filter or page change) draws nothing,
   * so the page never shows an older filter's rows under a newer filter.
   */
  function startLoad(view) {
    const ticket = (latestLoads[view] || 0) + 1;
    latestLoads[view] = ticket;
    return () => latestLoads[view] === ticket;
  }

  // ---------------------------------------------------------------- formatting

  /** Every time on the page is UTC, written `YYYY-MM-DD HH:MM:SSZ`. */
  function formatDate(value) {
    if (!value) return '–';
    const date = new Date(value);
    if (Number.isNaN(date.getTime())) return String(value);
    return date
      .toISOString()
      .replace('T', ' ')
      .replace(/\.\d+Z$/, 'Z');
  }

  function formatAge(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
    if (ms <= 0) return '0 s';
    const seconds = Math.floor(ms / 1000);
    if (seconds < 60) return seconds + ' s';
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + ' min ' + (seconds % 60) + ' s';
    const hours = Math.floor(minutes / 60);
    if (hours < 48) return hours + ' h ' + (minutes % 60) + ' min';
    return Math.floor(hours / 24) + ' d ' + (hours % 24) + ' h';
  }

  /** A time and how far it is from now: `2026-… (in 12 s)` or `(3 min 2 s ago)`. */
  function formatWhen(value) {
    if (!value) return '–';
    const at = new Date(value).getTime();
    if (Number.isNaN(at)) return String(value);
    const delta = at - Date.now();
    const relative =
      Math.abs(delta) < 1000
        ? 'now'
        : delta > 0
          ? 'in ' + formatAge(delta)
          : formatAge(-delta) + ' ago';
    return formatDate(value) + ' (' + relative + ')';
  }

  function plural(count, word) {
    return count + ' ' + word + (count === 1 ? '' : 's');
  }

  function errorLine(error) {
    return error ? error.name + ': ' + error.message : '';
  }

  function lastError(item) {
    const errors = item.errors || [];
    return errorLine(errors[errors.length - 1]);
  }

  function shortId(id) {
    return String(id).slice(0, 8) + '…';
  }

  function truncate(text, length) {
    const value = String(text);
    return value.length > length ? value.slice(0, length - 1) + '…' : value;
  }

  function describeFilter(filter) {
    const parts = FILTER_FIELDS.filter((f) => filter[f] !== undefined).map((f) =>
      f === 'failedBefore' ? 'failed before ' + formatDate(filter[f]) : f + ' = ' + filter[f],
    );
    return parts.length ? parts.join(', ') : 'no filter (every dead letter)';
  }

  /** A row that opens `hash` on click and on Enter. */
  function linkRow(row, hash) {
    row.addEventListener('click', () => void navigate(hash));
    row.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && event.target === row) void navigate(hash);
    });
    return row;
  }

  /** An error with its stack, when it has one, folded under it. */
  function errorBlock(error, heading) {
    return el(
      'div',
      { class: 'error-entry' },
      el('div', { class: 'error-head' }, heading),
      el('div', { class: 'error-text' }, errorLine(error)),
      error.stack
        ? el(
            'details',
            null,
            el('summary', null, 'Stack'),
            el('pre', { class: 'stack' }, error.stack),
          )
        : null,
    );
  }

  // ---------------------------------------------------------------- routing

  const STATES = {
    retrying: {
      title: 'Retrying',
      help: 'Deliveries that failed and wait for their next attempt.',
      when: 'Next attempt (UTC)',
    },
    scheduled: {
      title: 'Scheduled',
      help: 'Deliveries not yet due: their first attempt lies in the future.',
      when: 'Due at (UTC)',
    },
    leased: {
      title: 'In flight',
      help: 'Deliveries a worker holds right now, until its lease expires.',
      when: 'Lease until (UTC)',
    },
  };

  function pick(params, fields) {
    const filter = {};
    for (const field of fields) {
      const value = params.get(field);
      if (value) filter[field] = value;
    }
    return filter;
  }

  /** `#/overview`, `#/retrying?…`, `#/dead-letters?…`, `#/dead-letters/<id>`, `#/events/<id>`, `#/search?q=`. */
  function parseRoute() {
    const hash = window.location.hash.replace(/^#/, '') || '/overview';
    const [path, search] = hash.split('?');
    const params = new URLSearchParams(search || '');
    const detail = /^\/dead-letters\/([^/]+)$/.exec(path);
    if (detail) return { view: 'detail', id: decodeURIComponent(detail[1]) };
    const event = /^\/events\/([^/]+)$/.exec(path);
    if (event) {
      return { view: 'event', id: decodeURIComponent(event[1]), follow: params.get('follow') };
    }
    if (path === '/dead-letters') return { view: 'list', filter: pick(params, FILTER_FIELDS) };
    const state = path.slice(1);
    if (Object.prototype.hasOwnProperty.call(STATES, state)) {
      return { view: 'deliveries', state, filter: pick(params, DELIVERY_FIELDS) };
    }
    if (path === '/search') return { view: 'search', q: params.get('q') || '' };
    return { view: 'overview' };
  }

  function hashWith(path, filter, fields) {
    const search = queryOf(filter, fields).toString();
    return '#/' + path + (search ? '?' + search : '');
  }

  const listHash = (filter) => hashWith('dead-letters', filter, FILTER_FIELDS);

  function show(route) {
    const views = ['overview', 'deliveries', 'list', 'detail', 'event', 'search'];
    for (const name of views) $('view-' + name).hidden = name !== route.view;
    const tab =
      route.view === 'deliveries'
        ? route.state
        : route.view === 'list' || route.view === 'detail'
          ? 'dead'
          : route.view;
    for (const link of document.querySelectorAll('[data-nav]')) {
      const current = link.dataset.nav === tab;
      link.classList.toggle('current', current);
      link.ariaCurrent = current ? 'page' : null;
    }
  }

  let currentRoute = { view: 'overview' };
  // Bumped on every navigation: a follow loop or refresh of an older view stops.
  let routeToken = 0;

  /** Shows the view of `hash` and loads it; done when the view is loaded. */
  async function navigate(hash) {
    if (window.location.hash !== hash) window.history.pushState(null, '', hash);
    await route();
  }

  async function route() {
    const next = parseRoute();
    routeToken += 1;
    currentRoute = next;
    $('notice').hidden = true;
    // The search box shows what was searched only on the results of that search.
    if (next.view !== 'search') $('search-q').value = '';
    show(next);
    await guarded(() => load(next, false));
  }

  /** Loads the view of `route`; `refresh` keeps its page, selection and scroll. */
  async function load(next, refresh) {
    if (next.view === 'overview') await loadOverview();
    if (next.view === 'deliveries') await openDeliveries(next.state, next.filter, refresh);
    if (next.view === 'list') await openList(next.filter, refresh);
    if (next.view === 'detail' && !refresh) await loadDetail(next.id);
    if (next.view === 'event') await loadEvent(next.id, next.follow, refresh);
    if (next.view === 'search' && !refresh) await search(next.q);
    $('updated').textContent = 'updated ' + formatDate(new Date()).slice(11);
  }

  // ---------------------------------------------------------------- live refresh

  /**
   * Reloads the view shown every few seconds while "Live" is ticked, the tab is visible, no
   * dialog is open and no action is running; a detail view is left alone (it changes only when
   * you act on it, and a followed replay reads itself).
   */
  async function liveLoop() {
    for (;;) {
      await sleep(Number($('live-every').value) * 1000);
      if (!$('live-on').checked || document.hidden || $('confirm').open || acting > 0) continue;
      if (currentRoute.view === 'detail' || currentRoute.view === 'search') continue;
      const token = routeToken;
      await guarded(async () => {
        if (token === routeToken) await load(currentRoute, true);
      });
    }
  }

  // ---------------------------------------------------------------- catalog (pickers)

  let catalog = null;

  async function loadCatalog(force) {
    if (catalog && !force) return catalog;
    const data = await call('GET', 'catalog');
    catalog = {
      types: (data.types || []).slice().sort(),
      handlers: (data.handlers || []).map((h) => h.name).sort(),
    };
    return catalog;
  }

  /** Fills a <select> with "any" and `values`, keeping `current` even if no longer listed. */
  function fillPicker(select, values, current) {
    const options = values.slice();
    if (current && !options.includes(current)) options.push(current);
    clear(select);
    select.appendChild(el('option', null, 'any')).value = '';
    for (const value of options) select.appendChild(el('option', null, value)).value = value;
    select.value = current || '';
  }

  function fillPickers(form, filter) {
    fillPicker(form.elements.type, catalog.types, filter.type);
    fillPicker(form.elements.handler, catalog.handlers, filter.handler);
  }

  // ---------------------------------------------------------------- overview

  async function loadOverview() {
    const latest = startLoad('overview');
    const [stats, summary, throughput] = await Promise.all([
      call('GET', 'stats'),
      call('GET', 'dead-letters/summary'),
      call('GET', 'throughput'),
    ]);
    if (!latest()) return;
    setText('stat-pending', stats.pending);
    setText('stat-due', stats.due);
    setText('stat-leased', stats.leased);
    setText('stat-dead', stats.dead);
    setText('stat-oldest', stats.pending > 0 ? formatAge(stats.oldestPendingAgeMs) : '–');
    const handlers = (throughput.handlers || [])
      .slice()
      .sort((a, b) => (a.handler < b.handler ? -1 : 1));
    drawHandlers(handlers);
    drawHour(handlers);
    drawChart(summary.groups || []);
  }

  const MINUTE = 60000;

  /** Per-minute totals of the last 60 minutes, oldest first: [{ at, delivered, failed }]. */
  function lastHour(minutes) {
    const now = Math.floor(Date.now() / MINUTE);
    const buckets = Array.from({ length: 60 }, (_, i) => ({
      at: (now - 59 + i) * MINUTE,
      delivered: 0,
      failed: 0,
    }));
    for (const minute of minutes) {
      const index = Math.floor(new Date(minute.at).getTime() / MINUTE) - (now - 59);
      if (index < 0 || index >= 60) continue;
      buckets[index].delivered += minute.delivered || 0;
      buckets[index].failed += minute.failed || 0;
    }
    return buckets;
  }

  function drawHandlers(handlers) {
    const body = $('handlers').tBodies[0];
    const refocus = focusKeeper(body);
    clear(body);
    $('handlers-empty').hidden = handlers.length > 0;
    $('handlers').hidden = handlers.length === 0;
    for (const h of handlers) {
      const hour = lastHour(h.minutes || []);
      const delivered = hour.reduce((sum, m) => sum + m.delivered, 0);
      const failed = hour.reduce((sum, m) => sum + m.failed, 0);
      const recent = hour.slice(-5).reduce((sum, m) => sum + m.delivered, 0) / 5;
      const lag = h.lag || {};
      const oldest = lag.oldestDueAt
        ? formatAge(Date.now() - new Date(lag.oldestDueAt).getTime())
        : '–';
      const row = el(
        'tr',
        { 'data-id': h.handler, tabindex: 0, title: 'Show what is retrying for ' + h.handler },
        el('td', null, h.handler),
        el('td', { class: 'num' }, lag.pending === undefined ? '–' : lag.pending),
        el('td', { class: 'nowrap' }, oldest),
        el('td', { class: 'num' }, recent >= 10 ? Math.round(recent) : recent.toFixed(1)),
        el('td', { class: 'num' }, delivered),
        el('td', { class: failed > 0 ? 'num failing' : 'num' }, failed),
        el('td', null, sparkline(hour)),
      );
      body.appendChild(linkRow(row, hashWith('retrying', { handler: h.handler }, DELIVERY_FIELDS)));
    }
    refocus();
  }

  /** 60 one-minute columns, delivered up and failed (red) down from the middle line. */
  function sparkline(hour) {
    const max = Math.max(1, ...hour.map((m) => Math.max(m.delivered, m.failed)));
    const root = svg('svg', {
      class: 'spark',
      viewBox: '0 0 120 24',
      width: 120,
      height: 24,
      role: 'img',
      'aria-label': 'Delivered and failed per minute, last hour',
    });
    hour.forEach((m, i) => {
      const up = Math.round((m.delivered / max) * 11);
      const down = Math.round((m.failed / max) * 11);
      if (up)
        root.appendChild(
          svg('rect', { class: 'ok', x: i * 2, y: 12 - up, width: 1.6, height: up }),
        );
      if (down)
        root.appendChild(svg('rect', { class: 'bad', x: i * 2, y: 12, width: 1.6, height: down }));
    });
    root.appendChild(svg('line', { class: 'axis', x1: 0, y1: 12, x2: 120, y2: 12 }));
    return root;
  }

  /** The last hour of every handler together: delivered and failed per minute, stacked. */
  function drawHour(handlers) {
    const chart = $('hour-chart');
    clear(chart);
    const hour = lastHour(handlers.flatMap((h) => h.minutes || []));
    const max = Math.max(1, ...hour.map((m) => m.delivered + m.failed));
    const width = 720;
    const height = 150;
    const left = 44;
    const plot = height - 22;
    const step = (width - left) / 60;
    const total = (key) => hour.reduce((sum, m) => sum + m[key], 0);
    const root = svg('svg', {
      viewBox: '0 0 ' + width + ' ' + height,
      width,
      height,
      role: 'img',
      'aria-label':
        'Last hour: ' + total('delivered') + ' delivered, ' + total('failed') + ' failed attempts',
    });
    root.appendChild(svg('line', { class: 'axis', x1: left, y1: plot, x2: width, y2: plot }));
    root.appendChild(svg('text', { class: 'tick', x: left - 6, y: 10, 'text-anchor': 'end' }, max));
    root.appendChild(svg('text', { class: 'tick', x: left - 6, y: plot, 'text-anchor': 'end' }, 0));
    hour.forEach((m, i) => {
      const x = left + i * step + 1;
      const ok = (m.delivered / max) * (plot - 4);
      const bad = (m.failed / max) * (plot - 4);
      const label =
        formatDate(new Date(m.at)).slice(11, 16) +
        ' UTC: ' +
        m.delivered +
        ' delivered, ' +
        m.failed +
        ' failed';
      const column = svg('g', null, svg('title', null, label));
      if (ok > 0)
        column.appendChild(
          svg('rect', { class: 'ok', x, y: plot - ok, width: step - 2, height: ok }),
        );
      if (bad > 0)
        column.appendChild(
          svg('rect', { class: 'bad', x, y: plot - ok - bad, width: step - 2, height: bad }),
        );
      root.appendChild(column);
      if (i % 15 === 0 || i === 59) {
        // The last label ends at the right edge instead of running past it.
        const anchor = i === 59 ? 'end' : 'middle';
        root.appendChild(
          svg(
            'text',
            {
              class: 'tick',
              x: i === 59 ? width : x + step / 2,
              y: height - 6,
              'text-anchor': anchor,
            },
            formatDate(new Date(m.at)).slice(11, 16),
          ),
        );
      }
    });
    chart.appendChild(root);
    chart.appendChild(
      el(
        'p',
        { class: 'legend' },
        el('span', { class: 'key ok' }, ''),
        ' delivered ' + total('delivered') + '  ',
        el('span', { class: 'key bad' }, ''),
        ' failed attempts ' + total('failed'),
      ),
    );
  }

  /** Horizontal bars, one per summary group, largest first; a click lists exactly that group. */
  function drawChart(groups) {
    const chart = $('chart');
    clear(chart);
    $('chart-empty').hidden = groups.length > 0;
    if (groups.length === 0) return;
    const rows = groups.slice().sort((a, b) => b.count - a.count);
    const max = Math.max(...rows.map((row) => row.count));
    const width = 800;
    const labelWidth = 360;
    const barSpace = width - labelWidth - 60;
    const rowHeight = 38;
    const height = rows.length * rowHeight + 4;
    const root = svg('svg', {
      viewBox: '0 0 ' + width + ' ' + height,
      width,
      height,
      role: 'img',
      'aria-label': 'Dead letters by error fingerprint',
    });
    rows.forEach((row, i) => {
      const y = i * rowHeight + 2;
      const barWidth = Math.max(2, Math.round((row.count / max) * barSpace));
      const group = svg(
        'g',
        { class: 'bar-group', tabindex: 0, role: 'link' },
        svg('title', null, row.fingerprint + ' — ' + plural(row.count, 'dead letter')),
        svg('text', { class: 'label', x: 0, y: y + 13 }, truncate(row.fingerprint, 50)),
        svg(
          'text',
          { class: 'sublabel', x: 0, y: y + 29 },
          truncate(row.type + ' · ' + row.handler + ' · ' + row.errorName, 58),
        ),
        svg('rect', { class: 'bar', x: labelWidth, y: y + 4, width: barWidth, height: 24, rx: 3 }),
        svg('text', { class: 'count', x: labelWidth + barWidth + 6, y: y + 21 }, row.count),
      );
      // The group's four keys, so the list, its count and its bulk actions cover exactly the bar.
      const hash = listHash({
        type: row.type,
        handler: row.handler,
        errorName: row.errorName,
        fingerprint: row.fingerprint,
      });
      group.addEventListener('click', () => void navigate(hash));
      group.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' || event.key === ' ') {
          event.preventDefault();
          void navigate(hash);
        }
      });
      root.appendChild(group);
    });
    chart.appendChild(root);
  }

  // ---------------------------------------------------------------- paged tables

  /** Keyset paging over the API's cursors: cursors[i] opens page i; page 0 has none. */
  function pager() {
    return { filter: null, cursors: [null], page: 0, nextCursor: null, items: [] };
  }

  function sameFilter(a, b, fields) {
    return !!a && fields.every((f) => a[f] === b[f]);
  }

  function renderPager(prefix, state) {
    const empty = state.items.length === 0;
    $(prefix + '-first').disabled = state.page === 0;
    $(prefix + '-prev').disabled = state.page === 0;
    // A page filtered by error may come back short, even empty, with more after it.
    $(prefix + '-next').disabled = !state.nextCursor;
    // An empty table with nothing before or after it has nothing to page through.
    $(prefix === 'page' ? 'list-pager' : prefix + '-pager').hidden =
      empty && state.page === 0 && !state.nextCursor;
    $(prefix === 'page' ? 'page-label' : prefix + '-page').textContent =
      'Page ' + (state.page + 1) + (empty ? '' : ' · ' + plural(state.items.length, 'row'));
  }

  function turn(state, page) {
    if (page > state.page) state.cursors[page] = state.nextCursor;
    state.page = page;
    state.cursors.length = page + 1;
  }

  // ---------------------------------------------------------------- deliveries by state

  const deliveries = { ...pager(), state: null };

  async function openDeliveries(state, filter, refresh) {
    if (deliveries.state !== state || !sameFilter(deliveries.filter, filter, DELIVERY_FIELDS)) {
      Object.assign(deliveries, pager(), { state, filter });
    }
    const info = STATES[state];
    $('deliveries-title').textContent = info.title;
    $('deliveries-help').textContent = info.help;
    $('deliveries-when').textContent = info.when;
    await loadCatalog(false);
    if (!refresh) fillPickers($('deliveries-filter'), filter);
    await loadDeliveries();
  }

  async function loadDeliveries() {
    const query = queryOf(deliveries.filter, DELIVERY_FIELDS);
    query.set('state', deliveries.state);
    const cursor = deliveries.cursors[deliveries.page];
    if (cursor) query.set('cursor', cursor);
    const latest = startLoad('deliveries');
    const data = await call('GET', 'deliveries', { query });
    if (!latest()) return;
    deliveries.items = data.items || [];
    deliveries.nextCursor = data.nextCursor;
    const body = $('deliveries').tBodies[0];
    const refocus = focusKeeper(body);
    clear(body);
    for (const item of deliveries.items) {
      const when = deliveries.state === 'leased' ? item.leaseUntil : item.availableAt;
      const row = el(
        'tr',
        { 'data-id': item.id, tabindex: 0 },
        el('td', { class: 'nowrap', title: item.eventId }, el('code', null, shortId(item.eventId))),
        el('td', null, item.type),
        el('td', null, item.key === null || item.key === undefined ? '–' : item.key),
        el('td', null, item.handler),
        el('td', { class: 'num' }, item.attempt),
        el('td', { class: 'nowrap' }, formatWhen(when)),
        el('td', null, item.leaseOwner || '–'),
        el('td', { class: 'error' }, errorLine(item.lastError)),
      );
      body.appendChild(linkRow(row, '#/events/' + encodeURIComponent(item.eventId)));
    }
    refocus();
    $('deliveries-empty').hidden = deliveries.items.length > 0;
    $('deliveries').hidden = deliveries.items.length === 0;
    renderPager('deliveries', deliveries);
  }

  // ---------------------------------------------------------------- dead letters

  const list = { ...pager(), selected: new Set(), total: null };

  async function openList(filter, refresh) {
    if (!sameFilter(list.filter, filter, FILTER_FIELDS)) {
      Object.assign(list, pager(), { filter });
      list.selected.clear();
    }
    await loadCatalog(false);
    if (!refresh) fillFilterForm(filter);
    await loadPage(refresh);
  }

  /** The page of dead letters and the count of every one the filter matches, read together. */
  async function loadPage(keepSelection) {
    const query = queryOf(list.filter, FILTER_FIELDS);
    const cursor = list.cursors[list.page];
    const page = new URLSearchParams(query);
    if (cursor) page.set('cursor', cursor);
    const latest = startLoad('list');
    const [data, summary] = await Promise.all([
      call('GET', 'dead-letters', { query: page }),
      call('GET', 'dead-letters/summary', { query }),
    ]);
    if (!latest()) return;
    list.items = data.items;
    list.nextCursor = data.nextCursor;
    list.total = summary.total;
    const ids = new Set(list.items.map((item) => item.id));
    if (keepSelection) {
      for (const id of [...list.selected]) if (!ids.has(id)) list.selected.delete(id);
    } else {
      list.selected.clear();
    }
    renderList();
  }

  function renderList() {
    const body = $('dead-letters').tBodies[0];
    const refocus = focusKeeper(body);
    clear(body);
    for (const item of list.items) {
      const box = el('input', {
        type: 'checkbox',
        'data-id': item.id,
        'aria-label': 'Select dead letter ' + item.id,
      });
      box.checked = list.selected.has(item.id);
      box.addEventListener('click', (event) => event.stopPropagation());
      box.addEventListener('change', () => {
        if (box.checked) list.selected.add(item.id);
        else list.selected.delete(item.id);
        renderSelection();
      });
      const row = el(
        'tr',
        { 'data-id': item.id, tabindex: 0 },
        el('td', null, box),
        el('td', { class: 'nowrap' }, formatDate(item.deadAt)),
        el('td', null, item.type),
        el('td', null, item.handler),
        el('td', null, item.key === null || item.key === undefined ? '–' : item.key),
        el('td', { class: 'num' }, item.attempts),
        el('td', null, item.reason),
        el('td', { class: 'error' }, lastError(item)),
      );
      body.appendChild(linkRow(row, '#/dead-letters/' + encodeURIComponent(item.id)));
    }
    refocus();
    $('list-empty').hidden = list.items.length > 0;
    $('dead-letters').hidden = list.items.length === 0;
    $('filter-summary').textContent =
      plural(list.total, 'dead letter') + ' match: ' + describeFilter(list.filter);
    // The bulk buttons act on exactly what the count covers; on no match they do nothing.
    for (const [id, label] of [
      ['replay-matching', 'Replay all matching'],
      ['purge-matching', 'Purge all matching'],
    ]) {
      $(id).disabled = !list.total;
      $(id).textContent = label + ' (' + list.total + ')';
    }
    renderPager('page', list);
    renderSelection();
  }

  function renderSelection() {
    const count = list.selected.size;
    $('replay-selected').disabled = count === 0;
    $('purge-selected').disabled = count === 0;
    $('replay-selected').textContent = 'Replay selected' + (count ? ' (' + count + ')' : '');
    $('purge-selected').textContent = 'Purge selected' + (count ? ' (' + count + ')' : '');
    const all = $('select-page');
    all.disabled = list.items.length === 0;
    all.checked = count > 0 && count === list.items.length;
    all.indeterminate = count > 0 && count < list.items.length;
  }

  function fillFilterForm(filter) {
    const form = $('filter');
    fillPickers(form, filter);
    for (const field of ['key', 'errorName', 'fingerprint']) {
      form.elements[field].value = filter[field] || '';
    }
    form.elements.failedBefore.value = filter.failedBefore ? toUtcInput(filter.failedBefore) : '';
  }

  /** ISO time to the `datetime-local` input's `YYYY-MM-DDTHH:MM:SS`, in UTC like the table. */
  function toUtcInput(iso) {
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? '' : date.toISOString().slice(0, 19);
  }

  /** The form's filter: empty fields left out, the time read as UTC. */
  function readFilterForm() {
    const form = $('filter');
    const filter = {};
    for (const field of ['type', 'handler', 'key', 'errorName', 'fingerprint']) {
      const value = form.elements[field].value;
      if (value !== '') filter[field] = value;
    }
    const before = form.elements.failedBefore.value;
    if (before) {
      const date = new Date(before.length === 16 ? before + ':00Z' : before + 'Z');
      // An impossible date goes to the API as typed, which answers with a 400 naming the field.
      filter.failedBefore = Number.isNaN(date.getTime()) ? before : date.toISOString();
    }
    return filter;
  }

  // ---------------------------------------------------------------- actions

  /** Asks before a change; resolves to { confirmed, all }. `matchAll` requires the extra box. */
  function confirmAction(title, text, matchAll) {
    const dialog = $('confirm');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-all-label').hidden = !matchAll;
    $('confirm-all').checked = false;
    $('confirm-ok').disabled = matchAll;
    $('confirm-ok').textContent = title.split(' ')[0];
    return new Promise((resolve) => {
      const done = (confirmed) => {
        $('confirm-ok').removeEventListener('click', ok);
        $('confirm-cancel').removeEventListener('click', cancel);
        dialog.removeEventListener('cancel', cancel);
        $('confirm-all').removeEventListener('change', toggle);
        dialog.close();
        resolve({ confirmed, all: matchAll && $('confirm-all').checked });
      };
      const ok = () => done(true);
      const cancel = () => done(false);
      const toggle = () => {
        $('confirm-ok').disabled = !$('confirm-all').checked;
      };
      $('confirm-ok').addEventListener('click', ok);
      $('confirm-cancel').addEventListener('click', cancel);
      dialog.addEventListener('cancel', cancel);
      $('confirm-all').addEventListener('change', toggle);
      dialog.showModal();
    });
  }

  const VERBS = {
    replay: { title: 'Replay', done: 'Replayed', field: 'replayed' },
    purge: { title: 'Purge', done: 'Purged', field: 'purged' },
  };

  const EFFECT = {
    replay: 'They go back to pending with attempts reset and are delivered again.',
    purge: 'They are deleted for good.',
  };

  async function actOnSelection(action) {
    const ids = [...list.selected];
    if (ids.length === 0) return;
    const verb = VERBS[action];
    const answer = await confirmAction(
      verb.title + ' ' + plural(ids.length, 'dead letter') + '?',
      EFFECT[action],
      false,
    );
    if (!answer.confirmed) return;
    const result = await call('POST', 'dead-letters/' + action, { body: { ids } });
    notify(verb.done + ' ' + plural(result[verb.field], 'dead letter') + '.');
    await loadPage(false);
  }

  async function actOnFilter(action) {
    const filter = { ...list.filter };
    const matchAll = Object.keys(filter).length === 0;
    const verb = VERBS[action];
    // Counted again now, with the same filter the POST sends: what the dialog says is what it does.
    const summary = await call('GET', 'dead-letters/summary', {
      query: queryOf(filter, FILTER_FIELDS),
    });
    if (summary.total === 0) {
      notify('No dead letter matches the filter any more: nothing to ' + action + '.');
      await loadPage(false);
      return;
    }
    const answer = await confirmAction(
      verb.title + ' ' + plural(summary.total, 'dead letter') + ' matching the filter?',
      'Filter: ' +
        describeFilter(filter) +
        '. ' +
        EFFECT[action] +
        ' Dead letters that match by the time you confirm are included.',
      matchAll,
    );
    if (!answer.confirmed) return;
    const body = matchAll ? { filter: {}, all: answer.all } : { filter };
    const result = await call('POST', 'dead-letters/' + action, { body });
    notify(verb.done + ' ' + plural(result[verb.field], 'dead letter') + '.');
    Object.assign(list, { cursors: [null], page: 0 });
    await loadPage(false);
  }

  // ---------------------------------------------------------------- dead letter detail

  let current = null;

  async function loadDetail(id) {
    current = null;
    clear($('detail-fields'));
    $('detail-id').textContent = id;
    $('detail-payload').textContent = '';
    $('detail-headers').textContent = '';
    clear($('detail-errors'));
    $('detail-replay').disabled = true;
    $('detail-purge').disabled = true;
    $('detail-body').hidden = true;
    $('detail-back').href = listHash(list.filter || {});
    const latest = startLoad('detail');
    const item = await call('GET', 'dead-letters/' + encodeURIComponent(id));
    if (!latest()) return;
    current = item;
    const fields = [
      ['Id', item.id],
      ['Event id', item.eventId],
      ['Type', item.type],
      ['Handler', item.handler],
      ['Key', item.key === null || item.key === undefined ? '–' : item.key],
      ['Occurred at', formatDate(item.occurredAt)],
      ['Dead at', formatDate(item.deadAt)],
      ['Attempts', item.attempts],
      ['Reason', item.reason],
    ];
    for (const [name, value] of fields) {
      $('detail-fields').appendChild(el('dt', null, name));
      $('detail-fields').appendChild(el('dd', null, value));
    }
    $('detail-event').href = '#/events/' + encodeURIComponent(item.eventId);
    $('detail-payload').textContent = JSON.stringify(item.payload, null, 2);
    $('detail-headers').textContent = JSON.stringify(item.headers || {}, null, 2);
    for (const error of item.errors || []) {
      $('detail-errors').appendChild(
        errorBlock(
          error,
          'Attempt ' +
            error.attempt +
            ' · ' +
            formatDate(error.at) +
            ' · ' +
            (error.workerId || '–'),
        ),
      );
    }
    $('detail-body').hidden = false;
    $('detail-replay').disabled = false;
    $('detail-purge').disabled = false;
  }

  async function actOnCurrent(action) {
    if (!current) return;
    const item = current;
    const verb = VERBS[action];
    const answer = await confirmAction(
      verb.title + ' this dead letter?',
      item.type + ' for ' + item.handler + ' (' + item.id + ')',
      false,
    );
    if (!answer.confirmed) return;
    if (action === 'replay') {
      await replayAndFollow(item.id, item.eventId, item.handler);
      return;
    }
    const result = await call('POST', 'dead-letters/purge', { body: { ids: [item.id] } });
    if (result.purged === 0) {
      throw new ApiError(404, 'Nothing to purge', ['It is no longer a dead letter.']);
    }
    await navigate(listHash(list.filter || {}));
    notify('Purged dead letter ' + item.id + '.');
  }

  /** Replays one dead letter, then shows its event and follows that handler to its outcome. */
  async function replayAndFollow(id, eventId, handler) {
    const result = await call('POST', 'dead-letters/' + encodeURIComponent(id) + '/replay', {
      body: {},
    });
    if (result.replayed === 0) {
      throw new ApiError(404, 'Nothing to replay', ['It is no longer a dead letter.']);
    }
    await navigate(
      '#/events/' + encodeURIComponent(eventId) + '?follow=' + encodeURIComponent(handler),
    );
    notify('Replayed dead letter ' + id + '.');
  }

  // ---------------------------------------------------------------- one event across handlers

  const STATE_LABELS = {
    pending: 'pending',
    scheduled: 'scheduled',
    retrying: 'retrying',
    leased: 'in flight',
    delivered: 'delivered',
    dead: 'dead',
  };

  async function loadEvent(id, follow, refresh) {
    $('event-id').textContent = id;
    if (!refresh) {
      $('event-body').hidden = true;
      $('follow').hidden = true;
    }
    const latest = startLoad('event');
    const data = await call('GET', 'events/' + encodeURIComponent(id));
    if (!latest()) return;
    renderEvent(data);
    if (follow && !refresh) void followReplay(id, follow, routeToken);
  }

  function renderEvent(data) {
    const event = data.event || {};
    const fields = $('event-fields');
    clear(fields);
    const key = event.key === null || event.key === undefined ? null : event.key;
    const rows = [
      ['Id', event.id],
      ['Type', event.type],
      [
        'Key',
        key === null
          ? '–'
          : el('a', { href: '#/search?' + new URLSearchParams({ q: key }).toString() }, key),
      ],
      ['Occurred at', formatDate(event.occurredAt)],
    ];
    for (const [name, value] of rows) {
      fields.appendChild(el('dt', null, name));
      fields.appendChild(el('dd', null, value));
    }
    $('event-payload').textContent = JSON.stringify(event.payload, null, 2);
    $('event-headers').textContent = JSON.stringify(event.headers || {}, null, 2);
    const timeline = $('event-deliveries');
    clear(timeline);
    for (const d of data.deliveries || []) timeline.appendChild(deliveryCard(event, d));
    if (!(data.deliveries || []).length) {
      timeline.appendChild(el('p', { class: 'muted' }, 'No handler takes this type.'));
    }
    $('event-body').hidden = false;
  }

  function deliveryCard(event, d) {
    const when =
      d.state === 'leased'
        ? 'held by ' + (d.leaseOwner || '?') + ' until ' + formatWhen(d.leaseUntil)
        : d.state === 'pending' || d.state === 'scheduled' || d.state === 'retrying'
          ? 'next attempt ' + formatWhen(d.availableAt)
          : null;
    const head = el(
      'div',
      { class: 'delivery-head' },
      el('strong', null, d.handler),
      el('span', { class: 'badge', 'data-state': d.state }, STATE_LABELS[d.state] || d.state),
      d.attempt ? el('span', { class: 'muted' }, 'attempt ' + d.attempt) : null,
      when ? el('span', { class: 'muted' }, when) : null,
    );
    const card = el(
      'div',
      { class: 'delivery', 'data-state': d.state, 'data-id': d.handler },
      head,
    );
    if (d.state === 'dead' && d.deliveryId) {
      const replay = el('button', { type: 'button' }, 'Replay');
      replay.addEventListener(
        'click',
        () =>
          void guarded(async () => {
            const answer = await confirmAction(
              'Replay this dead letter?',
              event.type + ' for ' + d.handler + ' (' + d.deliveryId + ')',
              false,
            );
            if (answer.confirmed) await replayAndFollow(d.deliveryId, event.id, d.handler);
          }),
      );
      head.appendChild(replay);
      head.appendChild(
        el('a', { href: '#/dead-letters/' + encodeURIComponent(d.deliveryId) }, 'Dead letter'),
      );
    }
    const errors = d.errors || [];
    if (errors.length) {
      const list = el('div', { class: 'errors' });
      for (const error of errors) {
        list.appendChild(
          errorBlock(
            error,
            'Attempt ' +
              error.attempt +
              ' · ' +
              formatDate(error.at) +
              ' · ' +
              (error.workerId || '–'),
          ),
        );
      }
      card.appendChild(list);
    }
    return card;
  }

  /**
   * After a replay: reads the event every second until `handler` has delivered it or it is dead
   * again, and says which. Stops when you leave the view.
   */
  async function followReplay(eventId, handler, token) {
    const box = $('follow');
    const say = (outcome, text) => {
      box.dataset.outcome = outcome;
      box.className = 'follow ' + outcome;
      box.textContent = text;
      box.hidden = false;
    };
    say('waiting', 'Following the replay for ' + handler + ': waiting for a worker…');
    const started = Date.now();
    while (Date.now() - started < FOLLOW_FOR_MS) {
      await sleep(FOLLOW_EVERY_MS);
      if (token !== routeToken) return;
      let data;
      try {
        data = await call('GET', 'events/' + encodeURIComponent(eventId));
      } catch (error) {
        say(
          'waiting',
          'Following the replay for ' + handler + ': ' + error.message + '; trying again…',
        );
        continue;
      }
      if (token !== routeToken) return;
      renderEvent(data);
      const d = (data.deliveries || []).find((x) => x.handler === handler);
      if (!d) continue;
      if (d.state === 'delivered') {
        say('delivered', 'Delivered: the replay for ' + handler + ' succeeded.');
        return;
      }
      if (d.state === 'dead') {
        const errors = d.errors || [];
        say(
          'dead',
          'Dead again: the replay for ' +
            handler +
            ' failed (' +
            (errorLine(errors[errors.length - 1]) || 'no error recorded') +
            ').',
        );
        return;
      }
      say(
        'waiting',
        'Following the replay for ' +
          handler +
          ': ' +
          (STATE_LABELS[d.state] || d.state) +
          (d.attempt ? ', attempt ' + d.attempt : '') +
          '…',
      );
    }
    say('waiting', 'Not settled after ' + formatAge(FOLLOW_FOR_MS) + ': is a dispatcher running?');
  }

  // ---------------------------------------------------------------- search

  /** An id opens its event; anything else (or an id no event has) lists the events of that key. */
  async function find(q) {
    const text = q.trim();
    if (!text) return;
    if (UUID.test(text)) {
      try {
        await call('GET', 'events/' + encodeURIComponent(text));
        await navigate('#/events/' + encodeURIComponent(text.toLowerCase()));
        return;
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 404)) throw error;
      }
    }
    await navigate('#/search?' + new URLSearchParams({ q: text }).toString());
  }

  async function search(q) {
    $('search-key').textContent = q;
    $('search-q').value = q;
    const body = $('search-results').tBodies[0];
    clear(body);
    const latest = startLoad('search');
    const data = q ? await call('GET', 'events', { query: new URLSearchParams({ key: q }) }) : [];
    if (!latest()) return;
    const items = Array.isArray(data) ? data : (data && (data.items || data.events)) || [];
    for (const event of items) {
      const row = el(
        'tr',
        { 'data-id': event.id, tabindex: 0 },
        el('td', null, el('code', null, event.id)),
        el('td', null, event.type),
        el('td', { class: 'nowrap' }, formatDate(event.occurredAt)),
        el(
          'td',
          null,
          (event.handlers || [])
            .map((h) => h.handler + ': ' + (STATE_LABELS[h.state] || h.state))
            .join(', ') || '–',
        ),
      );
      body.appendChild(linkRow(row, '#/events/' + encodeURIComponent(event.id)));
    }
    $('search-more').hidden = !(data && data.nextCursor);
    $('search-empty').hidden = items.length > 0;
    $('search-results').hidden = items.length === 0;
  }

  // ---------------------------------------------------------------- wiring

  function on(id, event, handler) {
    $(id).addEventListener(event, (e) => {
      void guarded(() => handler(e));
    });
  }

  function start() {
    on('alert-close', 'click', clearError);
    $('search').addEventListener('submit', (event) => {
      event.preventDefault();
      void guarded(() => find($('search-q').value));
    });
    $('deliveries-filter').addEventListener('submit', (event) => {
      event.preventDefault();
      const form = $('deliveries-filter');
      const filter = {};
      for (const field of DELIVERY_FIELDS)
        if (form.elements[field].value) filter[field] = form.elements[field].value;
      void navigate(hashWith(deliveries.state, filter, DELIVERY_FIELDS));
    });
    on('deliveries-clear', 'click', () =>
      navigate(hashWith(deliveries.state, {}, DELIVERY_FIELDS)),
    );
    on('deliveries-first', 'click', () => (turn(deliveries, 0), loadDeliveries()));
    on(
      'deliveries-prev',
      'click',
      () => (turn(deliveries, Math.max(0, deliveries.page - 1)), loadDeliveries()),
    );
    on('deliveries-next', 'click', () =>
      deliveries.nextCursor ? (turn(deliveries, deliveries.page + 1), loadDeliveries()) : undefined,
    );
    $('filter').addEventListener('submit', (event) => {
      event.preventDefault();
      // The same filter again starts from its first page.
      list.filter = null;
      void navigate(listHash(readFilterForm()));
    });
    on('filter-clear', 'click', () => {
      list.filter = null;
      return navigate(listHash({}));
    });
    on('page-first', 'click', () => (turn(list, 0), loadPage(false)));
    on('page-prev', 'click', () => (turn(list, Math.max(0, list.page - 1)), loadPage(false)));
    on('page-next', 'click', () =>
      list.nextCursor ? (turn(list, list.page + 1), loadPage(false)) : undefined,
    );
    on('select-page', 'change', () => {
      const check = $('select-page').checked;
      list.selected.clear();
      if (check) for (const item of list.items) list.selected.add(item.id);
      for (const box of $('dead-letters').tBodies[0].querySelectorAll('input[type=checkbox]')) {
        box.checked = check;
      }
      renderSelection();
    });
    on('replay-selected', 'click', () => actOnSelection('replay'));
    on('purge-selected', 'click', () => actOnSelection('purge'));
    on('replay-matching', 'click', () => actOnFilter('replay'));
    on('purge-matching', 'click', () => actOnFilter('purge'));
    on('detail-replay', 'click', () => actOnCurrent('replay'));
    on('detail-purge', 'click', () => actOnCurrent('purge'));
    // Back, forward, and a hash typed in the address bar.
    window.addEventListener('popstate', () => {
      void route();
    });
    void route();
    void liveLoop();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
