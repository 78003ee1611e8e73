/* global document, window, fetch, URL, URLSearchParams */
// The outbox dead-letter dashboard. Plain browser JavaScript, no library, no build step.
//
// Safe by construction: every value from the server reaches the page as text, through
// textContent or createTextNode (never through the HTML parser), and attributes are set only from
// a fixed list of names. State changes are POSTs to the admin API, which validates them as it
// does any client's.
(function () {
  'use strict';

  const SVG = 'http://www.w3.org/2000/svg';
  const $ = (id) => document.getElementById(id);
  const FILTER_FIELDS = ['type', 'handler', 'key', 'failedBefore'];
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
    'x',
    'y',
    'width',
    'height',
    'viewBox',
    'rx',
    'text-anchor',
    'dominant-baseline',
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
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === 'object' ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function setText(id, value) {
    $(id).textContent = value === null || value === undefined ? '–' : String(value);
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
  /**
   * Runs an action, showing its error instead of throwing. `data-settled` on <body> counts the
   * actions finished, so a script (or a test) driving the page knows when one is done.
   */
  async function guarded(action) {
    try {
      clearError();
      await action();
    } catch (error) {
      showError(error);
    } finally {
      settled += 1;
      document.body.dataset.settled = String(settled);
    }
  }

  // ---------------------------------------------------------------- formatting

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

  function plural(count, word) {
    return count + ' ' + word + (count === 1 ? '' : 's');
  }

  function lastError(item) {
    const errors = item.errors || [];
    const last = errors[errors.length - 1];
    return last ? last.name + ': ' + last.message : '';
  }

  function describeFilter(filter) {
    const parts = FILTER_FIELDS.filter((f) => filter[f] !== undefined).map((f) =>
      f === 'failedBefore' ? 'failed before ' + formatDate(filter[f]) : f + ' = ' + filter[f],
    );
    return parts.length ? parts.join(', ') : 'no filter (every dead letter)';
  }

  // ---------------------------------------------------------------- routing

  /** `#/stats`, `#/dead-letters?type=…`, `#/dead-letters/<id>`. */
  function parseRoute() {
    const hash = window.location.hash.replace(/^#/, '') || '/stats';
    const [path, search] = hash.split('?');
    const params = new URLSearchParams(search || '');
    const detail = /^\/dead-letters\/([^/]+)$/.exec(path);
    if (detail) return { view: 'detail', id: decodeURIComponent(detail[1]) };
    if (path === '/dead-letters') {
      const filter = {};
      for (const field of FILTER_FIELDS) {
        const value = params.get(field);
        if (value) filter[field] = value;
      }
      return { view: 'list', filter };
    }
    return { view: 'stats' };
  }

  function listHash(filter) {
    const params = new URLSearchParams();
    for (const field of FILTER_FIELDS) if (filter[field]) params.set(field, filter[field]);
    const search = params.toString();
    return '#/dead-letters' + (search ? '?' + search : '');
  }

  function show(view) {
    for (const name of ['stats', 'list', 'detail']) $('view-' + name).hidden = name !== view;
    for (const link of document.querySelectorAll('[data-nav]')) {
      const current =
        link.dataset.nav === view || (view === 'detail' && link.dataset.nav === 'list');
      link.classList.toggle('current', current);
    }
  }

  /** Shows the view of `hash` and loads it; done when the view is loaded. */
  async function navigate(hash) {
    if (window.location.hash !== hash) window.history.pushState(null, '', hash);
    await route();
  }

  async function route() {
    const next = parseRoute();
    $('notice').hidden = true;
    show(next.view);
    if (next.view === 'stats') await guarded(loadStats);
    if (next.view === 'list') await guarded(() => openList(next.filter));
    if (next.view === 'detail') await guarded(() => loadDetail(next.id));
  }

  // ---------------------------------------------------------------- stats

  async function loadStats() {
    const [stats, summary] = await Promise.all([
      call('GET', 'stats'),
      call('GET', 'dead-letters/summary'),
    ]);
    setText('stat-pending', stats.pending);
    setText('stat-due', stats.due);
    setText('stat-leased', stats.leased);
    setText('stat-dead', stats.dead);
    setText('stat-oldest', stats.pending > 0 ? formatAge(stats.oldestPendingAgeMs) : '–');
    const body = $('by-type').tBodies[0];
    clear(body);
    for (const [type, counts] of Object.entries(stats.byType || {}).sort()) {
      body.appendChild(
        el(
          'tr',
          null,
          el('td', null, type),
          el('td', { class: 'num' }, counts.pending),
          el('td', { class: 'num' }, counts.leased),
          el('td', { class: 'num' }, counts.dead),
        ),
      );
    }
    drawChart(summary.groups || []);
  }

  /** Horizontal bars, one per summary group, largest first; a click lists that group. */
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
      const open = () => navigate(listHash({ type: row.type, handler: row.handler }));
      group.addEventListener('click', open);
      group.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' || event.key === ' ') open();
      });
      root.appendChild(group);
    });
    chart.appendChild(root);
  }

  function truncate(text, length) {
    const value = String(text);
    return value.length > length ? value.slice(0, length - 1) + '…' : value;
  }

  // ---------------------------------------------------------------- list

  const list = {
    filter: {},
    // cursors[i] opens page i; page 0 has none.
    cursors: [null],
    page: 0,
    nextCursor: null,
    items: [],
    selected: new Set(),
  };

  function sameFilter(a, b) {
    return FILTER_FIELDS.every((f) => a[f] === b[f]);
  }

  async function openList(filter) {
    if (!sameFilter(filter, list.filter)) {
      list.filter = filter;
      list.cursors = [null];
      list.page = 0;
    }
    fillFilterForm(filter);
    $('filter-summary').textContent = 'Showing: ' + describeFilter(filter);
    await loadPage();
  }

  async function loadPage() {
    const query = new URLSearchParams();
    for (const field of FILTER_FIELDS) {
      if (list.filter[field] !== undefined) query.set(field, list.filter[field]);
    }
    const cursor = list.cursors[list.page];
    if (cursor) query.set('cursor', cursor);
    const data = await call('GET', 'dead-letters', { query });
    list.items = data.items;
    list.nextCursor = data.nextCursor;
    list.selected.clear();
    renderList();
  }

  function renderList() {
    const body = $('dead-letters').tBodies[0];
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
      const open = () => navigate('#/dead-letters/' + encodeURIComponent(item.id));
      row.addEventListener('click', open);
      row.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' && event.target === row) open();
      });
      body.appendChild(row);
    }
    $('list-empty').hidden = list.items.length > 0;
    $('dead-letters').hidden = list.items.length === 0;
    $('page-label').textContent =
      'Page ' +
      (list.page + 1) +
      (list.items.length ? ' · ' + plural(list.items.length, 'row') : '');
    $('page-first').disabled = list.page === 0;
    $('page-prev').disabled = list.page === 0;
    $('page-next').disabled = !list.nextCursor;
    renderSelection();
  }

  function renderSelection() {
    const count = list.selected.size;
    $('replay-selected').disabled = count === 0;
    $('purge-selected').disabled = count === 0;
    $('replay-selected').textContent = 'Replay selected' + (count ? ' (' + count + ')' : '');
    $('purge-selected').textContent = 'Purge selected' + (count ? ' (' + count + ')' : '');
    const all = $('select-page');
    all.checked = count > 0 && count === list.items.length;
    all.indeterminate = count > 0 && count < list.items.length;
  }

  function fillFilterForm(filter) {
    const form = $('filter');
    form.elements.type.value = filter.type || '';
    form.elements.handler.value = filter.handler || '';
    form.elements.key.value = filter.key || '';
    form.elements.failedBefore.value = filter.failedBefore ? toLocalInput(filter.failedBefore) : '';
  }

  /** ISO time to the `datetime-local` input's `YYYY-MM-DDTHH:MM:SS`, in the browser's zone. */
  function toLocalInput(iso) {
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return '';
    const local = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
    return local.toISOString().slice(0, 19);
  }

  /** The form's filter: empty fields left out, the local time as ISO-8601 (UTC). */
  function readFilterForm() {
    const form = $('filter');
    const filter = {};
    for (const field of ['type', 'handler', 'key']) {
      const value = form.elements[field].value;
      if (value !== '') filter[field] = value;
    }
    const before = form.elements.failedBefore.value;
    if (before) {
      const date = new Date(before);
      // An impossible date goes to the API as typed, which answers with a 400 naming the field.
      filter.failedBefore = Number.isNaN(date.getTime()) ? before : date.toISOString();
    }
    return filter;
  }

  /** Lists the dead letters `filter` selects, from the first page (also for the same filter). */
  async function applyFilter(filter) {
    list.cursors = [null];
    list.page = 0;
    await navigate(listHash(filter));
  }

  async function turnPage(page) {
    if (page > list.page) list.cursors[page] = list.nextCursor;
    list.page = page;
    list.cursors.length = page + 1;
    await loadPage();
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

  async function actOnSelection(action) {
    const ids = [...list.selected];
    if (ids.length === 0) return;
    const verb = VERBS[action];
    const answer = await confirmAction(
      verb.title + ' ' + plural(ids.length, 'dead letter') + '?',
      action === 'replay'
        ? 'They go back to pending with attempts reset and are delivered again.'
        : 'They are deleted for good.',
      false,
    );
    if (!answer.confirmed) return;
    const result = await call('POST', 'dead-letters/' + action, { body: { ids } });
    notify(verb.done + ' ' + plural(result[verb.field], 'dead letter') + '.');
    await loadPage();
  }

  async function actOnFilter(action) {
    const filter = { ...list.filter };
    const matchAll = Object.keys(filter).length === 0;
    const verb = VERBS[action];
    const query = new URLSearchParams(filter);
    const summary = await call('GET', 'dead-letters/summary', { query });
    const answer = await confirmAction(
      verb.title + ' ' + plural(summary.total, 'dead letter') + ' matching the filter?',
      'Filter: ' +
        describeFilter(filter) +
        '. ' +
        (action === 'replay'
          ? 'They go back to pending with attempts reset and are delivered again.'
          : 'They are deleted for good.') +
        ' Dead letters that match by the time you confirm are included.',
      matchAll,
    );
    if (!answer.confirmed) return;
    const body = matchAll ? { filter: {}, all: answer.all } : { filter };
    const result = await call('POST', 'dead-letters/' + action, { body });
    notify(verb.done + ' ' + plural(result[verb.field], 'dead letter') + '.');
    list.cursors = [null];
    list.page = 0;
    await loadPage();
  }

  // ---------------------------------------------------------------- detail

  let current = null;

  async function loadDetail(id) {
    current = null;
    clear($('detail-fields'));
    $('detail-id').textContent = id;
    $('detail-payload').textContent = '';
    $('detail-headers').textContent = '';
    clear($('detail-errors').tBodies[0]);
    $('detail-replay').disabled = true;
    $('detail-purge').disabled = true;
    $('detail-body').hidden = true;
    const item = await call('GET', 'dead-letters/' + encodeURIComponent(id));
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
    $('detail-payload').textContent = JSON.stringify(item.payload, null, 2);
    $('detail-headers').textContent = JSON.stringify(item.headers || {}, null, 2);
    const errors = $('detail-errors').tBodies[0];
    for (const error of item.errors || []) {
      errors.appendChild(
        el(
          'tr',
          null,
          el('td', { class: 'num' }, error.attempt),
          el('td', null, formatDate(error.at)),
          el('td', null, error.name),
          el('td', null, error.message),
          el('td', null, error.workerId || '–'),
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
    const result =
      action === 'replay'
        ? await call('POST', 'dead-letters/' + encodeURIComponent(item.id) + '/replay', {
            body: {},
          })
        : await call('POST', 'dead-letters/purge', { body: { ids: [item.id] } });
    if (result[verb.field] === 0) {
      throw new ApiError(404, 'Nothing to ' + action, ['It is no longer a dead letter.']);
    }
    await navigate(listHash(list.filter));
    notify(verb.done + ' dead letter ' + item.id + '.');
  }

  // ---------------------------------------------------------------- wiring

  function on(id, event, handler) {
    $(id).addEventListener(event, (e) => {
      void guarded(() => handler(e));
    });
  }

  function start() {
    on('alert-close', 'click', clearError);
    on('stats-refresh', 'click', loadStats);
    $('filter').addEventListener('submit', (event) => {
      event.preventDefault();
      void applyFilter(readFilterForm());
    });
    on('filter-clear', 'click', () => applyFilter({}));
    on('page-first', 'click', () => turnPage(0));
    on('page-prev', 'click', () => turnPage(Math.max(0, list.page - 1)));
    on('page-next', 'click', () => (list.nextCursor ? turnPage(list.page + 1) : undefined));
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
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
