// The page for people (docs/web-page.md): asks for the API key once (session storage), submits
// URLs, follows every job of the page over one event stream (GET /events), plays finished jobs
// with their waveform. Plain ES module, no build step; the waveform component is wavesurfer.js,
// served from its npm package.
import WaveSurfer from '/vendor/wavesurfer.js@8.0.1/wavesurfer.esm.js';

const KEY_STORAGE = 'source-fetch.api-key';
const JOBS_STORAGE = 'source-fetch.jobs';
/**
 * Jobs the page lists and remembers: the most one event stream carries (GET /events), so that
 * the page follows all of them over one connection.
 */
const MAX_JOBS = 200;
/** The most URLs one POST /sources/batch takes; more are sent in turn. */
const MAX_BATCH_URLS = 100;
/** A collection's entries are read in pages of this many (GET /jobs/{id}/items takes 1 to 100). */
const ITEMS_PAGE = 100;
/** Cancels sent at once by "Cancel all": a browser has six connections to a host, one is the stream. */
const CANCELS_AT_ONCE = 3;
const FINAL = new Set(['done', 'failed', 'canceled']);
/** Without peaks.json the WAV is decoded in the browser for its waveform only up to this size. */
const MAX_DECODED_BYTES = 16 * 1024 * 1024;
/** A stream that ended early, or could not open, is opened again after this long. */
const RECONNECT_MS = 2000;
/** Download speed is measured over the progress of about this long. */
const SPEED_WINDOW_MS = 5000;
const SEEK_STEP_S = 5;
const SEEK_PAGE_S = 30;

const $ = (id) => document.getElementById(id);
const status = $('status');
/**
 * job id → { element, record, player, samples: [{ at, bytes }] }; a collection's parent also has
 * `entries` (its items as read: { after, reading, again, whole, seen, children: Set }), a child `parentId`
 * and `entryTitle` (the title its collection listed).
 */
const jobs = new Map();

class Unauthorized extends Error {}

function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE);
}

/** An API request with the key in a header; a 401 asks for the key again. */
async function api(path, init = {}) {
  const response = await fetch(path, {
    ...init,
    headers: { ...(init.headers ?? {}), authorization: `Bearer ${apiKey()}` },
    cache: 'no-store',
  });
  if (response.status === 401) {
    sessionStorage.removeItem(KEY_STORAGE);
    showKeyForm('The service refused the API key. Enter it again.');
    throw new Unauthorized('unauthorized');
  }
  return response;
}

/** The words of a problem document (RFC 9457), or of any other failed answer. */
async function problemText(response) {
  try {
    const problem = await response.json();
    return `${problem.detail ?? problem.title ?? 'Request failed'} (${problem.code ?? response.status})`;
  } catch {
    return `Request failed (HTTP ${response.status})`;
  }
}

function announce(text) {
  status.textContent = text;
}

// --- The API key --------------------------------------------------------------------------

function showKeyForm(error = '') {
  $('key-section').hidden = false;
  $('submit-section').hidden = true;
  $('jobs-section').hidden = true;
  $('forget-key').hidden = true;
  $('key-error').textContent = error;
  $('key-input').setAttribute('aria-invalid', error ? 'true' : 'false');
  stopStream();
  $('key-input').focus();
}

/**
 * Whether the service takes the key: the cheapest keyed request, GET of a job id that cannot
 * exist, answers 404 with a good key and 401 with a wrong one.
 */
async function keyIsAccepted(key) {
  const response = await fetch('/jobs/00000000-0000-0000-0000-000000000000', {
    headers: { authorization: `Bearer ${key}` },
    cache: 'no-store',
  });
  if (response.status === 401) return false;
  if (response.status === 404 || response.ok) return true;
  throw new Error(await problemText(response));
}

$('key-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const key = $('key-input').value.trim();
  if (!key) {
    $('key-error').textContent = 'Enter the API key.';
    return;
  }
  $('key-error').textContent = 'Checking…';
  try {
    if (!(await keyIsAccepted(key))) {
      $('key-error').textContent = 'Wrong API key: the service refused it.';
      $('key-input').setAttribute('aria-invalid', 'true');
      $('key-input').select();
      return;
    }
  } catch (err) {
    $('key-error').textContent = `Could not check the key: ${err.message}`;
    return;
  }
  sessionStorage.setItem(KEY_STORAGE, key);
  $('key-input').value = '';
  $('key-error').textContent = '';
  startWithKey();
  announce('API key accepted.');
  $('urls').focus();
});

// The jobs listed were this key's: forgetting the key forgets them, so that another key's holder
// at this browser does not see them.
$('forget-key').addEventListener('click', () => {
  sessionStorage.removeItem(KEY_STORAGE);
  for (const id of [...jobs.keys()]) removeJob(id);
  localStorage.removeItem(JOBS_STORAGE);
  // And the URLs typed or refused under it.
  $('urls').value = '';
  $('submit-error').textContent = '';
  updateList();
  showKeyForm();
  announce('API key forgotten, and the jobs listed with it.');
});

// --- Remembered jobs ----------------------------------------------------------------------

function rememberedIds() {
  try {
    const ids = JSON.parse(localStorage.getItem(JOBS_STORAGE) ?? '[]');
    return Array.isArray(ids) ? ids.filter((id) => typeof id === 'string').slice(0, MAX_JOBS) : [];
  } catch {
    return [];
  }
}

/** The jobs listed, newest first, as the page lists them. */
function listedIds() {
  return [...$('jobs').children].map((item) => item.dataset.jobId);
}

function saveList() {
  localStorage.setItem(JOBS_STORAGE, JSON.stringify(listedIds()));
}

function startWithKey() {
  $('key-section').hidden = true;
  $('submit-section').hidden = false;
  $('jobs-section').hidden = false;
  $('forget-key').hidden = false;
  // Oldest first, each placed at the top: the newest ends first. Their states come with the stream.
  for (const id of [...rememberedIds()].reverse()) if (!jobs.has(id)) addJob(id, null);
  updateList();
  syncStream();
}

// --- Submitting ---------------------------------------------------------------------------

const urlsField = $('urls');
let submitting = false;

// In the textarea Enter is a new line: Ctrl+Enter (Cmd+Enter on a Mac) submits, as the label says.
urlsField.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    $('submit-form').requestSubmit();
  }
});

/**
 * Submits `urls` (batches of at most MAX_BATCH_URLS); the accepted jobs are listed. Returns the
 * refused lines. `playlist` (`{}` or `{ max_items }`) makes each URL a collection.
 */
async function submitUrls(urls, playlist = null) {
  const refused = [];
  let accepted = 0;
  for (let at = 0; at < urls.length; at += MAX_BATCH_URLS) {
    const chunk = urls.slice(at, at + MAX_BATCH_URLS);
    const single = urls.length === 1;
    const response = await api(single ? '/sources' : '/sources/batch', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(
        single
          ? { url: chunk[0], ...(playlist ? { playlist } : {}) }
          : { urls: playlist ? chunk.map((url) => ({ url, playlist })) : chunk },
      ),
    });
    if (!response.ok) {
      const problem = await problemText(response);
      for (const url of urls.slice(at)) refused.push({ url, why: problem });
      break;
    }
    const body = await response.json();
    const items = single ? [{ outcome: 'accepted', url: chunk[0], job: body }] : body.results;
    for (const item of items) {
      if (item.outcome === 'accepted') {
        accepted++;
        update(item.job);
      } else {
        refused.push({ url: item.url, why: `${item.problem.detail ?? item.problem.title} (${item.problem.code})` });
      }
    }
  }
  saveList();
  syncStream();
  return { accepted, refused };
}

$('submit-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  if (submitting) return;
  const urls = urlsField.value
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const error = $('submit-error');
  error.textContent = '';
  if (urls.length === 0) {
    error.textContent = 'Enter at least one URL.';
    urlsField.focus();
    return;
  }
  let playlist = null;
  if ($('playlist').checked) {
    const max = $('max-items').value.trim();
    if (max && !/^[1-9][0-9]*$/.test(max)) {
      error.textContent = 'At most this many entries: a whole number of 1 or more, or empty.';
      $('max-items').setAttribute('aria-invalid', 'true');
      $('max-items').focus();
      return;
    }
    $('max-items').setAttribute('aria-invalid', 'false');
    playlist = max ? { max_items: Number(max) } : {};
  }
  // Not disabled while it waits: a disabled button would drop the keyboard's focus out of the form.
  submitting = true;
  $('submit-form').setAttribute('aria-busy', 'true');
  try {
    const { accepted, refused } = await submitUrls(urls, playlist);
    error.textContent = refused.length ? `Refused: ${refused.map(({ url, why }) => `${url}: ${why}`).join('; ')}` : '';
    if (accepted > 0) urlsField.value = refused.map(({ url }) => url).join('\n');
    announce(
      `${accepted} job${accepted === 1 ? '' : 's'} submitted${refused.length ? `, ${refused.length} refused` : ''}.`,
    );
  } catch (err) {
    if (!(err instanceof Unauthorized)) error.textContent = `Could not submit: ${err.message}`;
  } finally {
    submitting = false;
    $('submit-form').removeAttribute('aria-busy');
  }
  // The focus stays in the form, for the next URLs.
  if (!$('submit-form').contains(document.activeElement) && !$('submit-section').hidden) urlsField.focus();
});

$('playlist').addEventListener('change', () => {
  $('max-items-row').hidden = !$('playlist').checked;
});

// --- Jobs ---------------------------------------------------------------------------------

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === 'text') node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

function button(text, className, onClick, describedBy) {
  const node = el('button', { type: 'button', class: className, hidden: '', 'aria-describedby': describedBy, text });
  node.addEventListener('click', onClick);
  return node;
}

/** Players are made when their job comes near the screen: a hundred finished jobs make no hundred requests. */
const nearScreen = new IntersectionObserver(
  (entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      const job = jobs.get(entry.target.dataset.jobId);
      if (job && job.record?.status === 'done' && !job.shown) showResult(job, job.record);
    }
  },
  { rootMargin: '600px 0px' },
);

/**
 * Lists a job: at the top of the page's list, or, for a collection's child (`parent` its parent's
 * entry), last in its parent's entries, in the collection's order.
 */
function addJob(id, record, parent = null) {
  const titleId = `job-${id}-title`;
  const element = el(
    'li',
    { class: 'job', 'data-job-id': id, 'aria-labelledby': titleId },
    el(parent ? 'h4' : 'h3', { id: titleId, class: 'job-title', tabindex: '-1', text: record?.url ?? id }),
    el('p', { class: 'job-url', hidden: '' }),
    el(
      'p',
      { class: 'job-state' },
      el('span', { class: 'badge', 'data-field': 'status', text: 'loading' }),
      el('span', { class: 'badge born-done', hidden: '', text: 'already stored' }),
      el('span', { 'data-field': 'detail' }),
    ),
    el('progress', { max: '100', 'aria-label': 'Progress', hidden: '' }),
    el('p', { class: 'counts', 'data-field': 'counts', hidden: '' }),
    el('p', { class: 'job-times', 'data-field': 'times' }),
    el('p', { class: 'problem', 'data-field': 'error', hidden: '' }),
    el('p', { class: 'error-detail', 'data-field': 'error-detail', hidden: '' }),
    el('div', { class: 'job-actions' }),
    el('div', { class: 'job-result' }),
  );
  const job = { element, record: null, player: null, shown: false, samples: [], parentId: parent?.id ?? null };
  element.querySelector('.job-actions').append(
    button('Cancel', 'quiet cancel', () => void cancelJob(id), titleId),
    button('Retry', 'quiet retry', () => void retryJob(id), titleId),
    button('Fetch the whole playlist', 'quiet as-collection', () => void retryJob(id, { asCollection: true }), titleId),
    button('Remove', 'quiet remove', () => removeFromList(id), titleId),
  );
  if (parent) {
    parent.element.querySelector('.entries').append(element);
    parent.job.entries.children.add(id);
  } else $('jobs').prepend(element);
  jobs.set(id, job);
  nearScreen.observe(element);
  return job;
}

function removeJob(id) {
  const job = jobs.get(id);
  if (!job) return;
  // A collection's children leave with it.
  for (const child of job.entries?.children ?? []) removeJob(child);
  if (job.parentId) jobs.get(job.parentId)?.entries?.children.delete(id);
  nearScreen.unobserve(job.element);
  job.player?.destroy();
  job.element.remove();
  jobs.delete(id);
}

/** Remove, Clear finished: the job leaves the list (at the service it stays as it is). */
function removeFromList(id) {
  const item = jobs.get(id)?.element;
  if (!item) return;
  const next = item.nextElementSibling ?? item.previousElementSibling;
  const hadFocus = item.contains(document.activeElement);
  removeJob(id);
  saveList();
  updateList();
  if (hadFocus) (next?.querySelector('.job-title') ?? $('jobs-heading')).focus();
}

/** Keeps the list within MAX_JOBS: the oldest finished jobs go first, then the oldest. */
function trimList() {
  const ids = listedIds();
  let over = ids.length - MAX_JOBS;
  for (const id of [...ids].reverse()) {
    if (over <= 0) return;
    if (FINAL.has(jobs.get(id)?.record?.status)) {
      removeJob(id);
      over--;
    }
  }
  for (const id of listedIds().reverse().slice(0, over)) removeJob(id);
}

/** The list's empty note, its counts and the buttons for all jobs. */
function updateList() {
  const records = [...jobs.values()].filter((job) => !job.parentId).map((job) => job.record);
  const active = records.filter((record) => record && !FINAL.has(record.status)).length;
  const finished = records.filter((record) => record && FINAL.has(record.status)).length;
  $('no-jobs').hidden = records.length > 0;
  $('jobs-tools').hidden = records.length === 0;
  $('cancel-all').hidden = active === 0;
  $('cancel-all').textContent = `Cancel all (${active})`;
  $('clear-finished').hidden = finished === 0;
  $('clear-finished').textContent = `Clear finished (${finished})`;
  for (const control of [$('cancel-all'), $('clear-finished')]) {
    if (control.hidden && document.activeElement === control) $('jobs-heading').focus();
  }
}

function showJobProblem(id, text, detail = '') {
  const item = jobs.get(id)?.element;
  if (!item) return;
  const field = item.querySelector('[data-field="error"]');
  field.textContent = text;
  field.hidden = false;
  const secondary = item.querySelector('[data-field="error-detail"]');
  secondary.textContent = detail;
  secondary.hidden = !detail;
}

/**
 * What a person calls the job: for a collection's child, the title its collection listed it
 * with; else the media's title when the service knows it (a collection's: its playlist's title);
 * else its URL.
 */
function nameOf(record, listedTitle = null) {
  const known = record.kind === 'collection' ? record.collection?.title : record.media?.title;
  const title = [listedTitle, known].find((value) => typeof value === 'string' && value.trim());
  return title?.trim() ?? record.url;
}

/** Hides a control; the keyboard's focus, if it was there, goes to the job's title. */
function setShown(item, selector, shown) {
  const control = item.querySelector(selector);
  if (!shown && document.activeElement === control) item.querySelector('.job-title').focus();
  control.hidden = !shown;
}

/** Shows a job record (from the stream, a submit, a cancel). */
function update(record) {
  const id = record.job_id;
  const job = jobs.get(id) ?? addJob(id, record);
  const before = job.record?.status;
  job.record = record;
  const { element } = job;
  element.dataset.status = record.status;
  element.dataset.bornDone = String(record.born_done === true);
  const name = nameOf(record, job.entryTitle);
  element.querySelector('.job-title').textContent = name;
  const url = element.querySelector('.job-url');
  url.textContent = record.url;
  url.hidden = name === record.url;
  element.querySelector('.born-done').hidden = record.born_done !== true;

  const phase = phaseOf(job, record);
  element.dataset.phase = phase.name;
  element.querySelector('[data-field="status"]').textContent = phase.name;
  element.querySelector('[data-field="detail"]').textContent = phase.detail;
  const progress = element.querySelector('progress');
  progress.hidden = phase.percent === undefined;
  if (typeof phase.percent === 'number') {
    progress.value = phase.percent;
    progress.setAttribute('aria-valuetext', `${phase.percent} %`);
  } else {
    progress.removeAttribute('value');
    progress.removeAttribute('aria-valuetext');
  }
  showTimes(element, record);

  const error = element.querySelector('[data-field="error"]');
  const detail = element.querySelector('[data-field="error-detail"]');
  error.hidden = !record.error;
  error.textContent = record.error?.message ?? '';
  const said = [record.error?.code, record.error?.detail].filter((part) => typeof part === 'string' && part);
  detail.hidden = !record.error || said.length === 0;
  detail.textContent = record.error ? said.join(': ') : '';

  const ended = FINAL.has(record.status);
  setShown(element, '.cancel', !ended);
  // A child's list is its collection's: it is retried or removed with the whole.
  // A playlist submitted as one URL fails the same way again: it is offered as a whole instead.
  const isPlaylist = record.error?.code === 'playlist_not_supported';
  setShown(
    element,
    '.retry',
    !job.parentId && !isPlaylist && (record.status === 'failed' || record.status === 'canceled'),
  );
  setShown(element, '.as-collection', !job.parentId && isPlaylist);
  setShown(element, '.remove', !job.parentId && ended);
  if (record.status === 'done' && !job.shown && isNearScreen(element)) showResult(job, record);
  if (record.status === 'done' && record.result?.evicted) showJobProblem(id, record.result.evicted.message);
  if (record.kind === 'collection') showCollection(job, record, before);
  // A collection's children are said through its counts, not one by one.
  if (before && before !== record.status && !job.parentId) {
    announce(`${name}: ${record.status}${record.error ? `: ${record.error.message}` : ''}`);
  }
  updateList();
}

/**
 * A collection's counts and its entries: the list is made once; its items are read as its
 * counts change (those found, and those ended: children the stream does not carry), and all
 * again once it has ended.
 */
function showCollection(job, record, before) {
  const { element } = job;
  if (!job.entries) {
    job.entries = { after: 0, reading: false, again: false, whole: false, children: new Set(), seen: '' };
    element
      .querySelector('.job-result')
      .before(el('ol', { class: 'entries', 'aria-label': `Entries of ${nameOf(record)}` }));
  }
  element.querySelector('.entries').setAttribute('aria-label', `Entries of ${nameOf(record)}`);
  const counts = record.collection;
  const field = element.querySelector('[data-field="counts"]');
  field.hidden = !counts;
  if (!counts) return;
  const parts = [
    `${counts.entries_found} found`,
    `${counts.done} done`,
    `${counts.failed} failed`,
    `${counts.refused} refused`,
  ];
  if (counts.canceled) parts.push(`${counts.canceled} canceled`);
  if (counts.truncated) parts.push(`cut at ${counts.max_items}`);
  field.textContent = parts.join(' · ');
  if (counts.listing_error) showJobProblem(record.job_id, `The listing ended early: ${counts.listing_error.message}`);
  const seen = JSON.stringify([counts.entries_found, counts.done, counts.failed, counts.canceled, record.status]);
  if (seen === job.entries.seen) return;
  job.entries.seen = seen;
  // Once it has ended, or when some children under way are not in the stream, every item is read
  // again for its child's state; else only the items not read yet.
  const ended = FINAL.has(record.status) && before !== undefined && !FINAL.has(before);
  const unfollowed = [...job.entries.children].some((id) => underWay(id) && !stream?.ids.has(id));
  void readItems(record.job_id, ended || unfollowed);
}

/** Reads a collection's items (from its first with `whole`, else after those read) and shows them. */
async function readItems(parentId, whole) {
  const parent = jobs.get(parentId);
  if (!parent?.entries) return;
  const entries = parent.entries;
  if (entries.reading) {
    entries.again = true;
    entries.whole ||= whole;
    return;
  }
  entries.reading = true;
  try {
    let after = whole ? 0 : entries.after;
    for (;;) {
      const response = await api(`/jobs/${encodeURIComponent(parentId)}/items?after=${after}&limit=${ITEMS_PAGE}`);
      if (!response.ok) {
        showJobProblem(parentId, `Could not read its entries: ${await problemText(response)}`);
        break;
      }
      const page = await response.json();
      if (!jobs.has(parentId)) return;
      for (const item of page.items) showItem(parent, parentId, item);
      if (page.items.length > 0) {
        after = page.items.at(-1).index;
        entries.after = Math.max(entries.after, after);
      }
      if (page.next_after === null || page.next_after === undefined) break;
      after = page.next_after;
    }
  } catch (err) {
    if (!(err instanceof Unauthorized)) showJobProblem(parentId, `Could not read its entries: ${err.message}`);
  } finally {
    entries.reading = false;
  }
  syncStream();
  if (entries.again) {
    const again = entries.whole;
    entries.again = false;
    entries.whole = false;
    void readItems(parentId, again);
  }
}

/** One item of a collection: its child job, listed as any job, or the problem that refused it. */
function showItem(parent, parentId, item) {
  const list = parent.element.querySelector('.entries');
  if (item.outcome === 'refused') {
    if (list.querySelector(`[data-index="${item.index}"]`)) return;
    const titleId = `job-${parentId}-entry-${item.index}`;
    const problem = item.problem ?? {};
    list.append(
      el(
        'li',
        { class: 'entry-refused', 'data-index': String(item.index), 'aria-labelledby': titleId },
        el('h4', { id: titleId, text: (item.title ?? '').trim() || item.url }),
        el('p', { class: 'job-url', text: item.url }),
        el('p', { class: 'job-state' }, el('span', { class: 'badge', text: 'refused' })),
        el('p', { class: 'problem', text: problem.detail ?? problem.title ?? 'Refused' }),
        el('p', { class: 'error-detail', text: problem.code ?? '' }),
      ),
    );
    return;
  }
  const id = item.job.job_id;
  const known = jobs.get(id);
  if (known && known.parentId !== parentId) return;
  if (known) {
    // The stream brings the states of the children it carries; the items those of the others.
    if (!stream?.ids.has(id) || FINAL.has(item.job.status)) update(item.job);
    return;
  }
  const child = addJob(id, item.job, { id: parentId, element: parent.element, job: parent });
  child.entryTitle = item.title;
  update(item.job);
}

function isNearScreen(element) {
  const box = element.getBoundingClientRect();
  return box.bottom > -600 && box.top < innerHeight + 600;
}

/**
 * The job's phase as its record tells it: queued, downloading (with what has arrived, the speed
 * over the last seconds of progress and the time left), converting (the download complete: the
 * WAV is being made, checked and stored), then its end.
 */
function phaseOf(job, record) {
  if (record.kind === 'collection') {
    const counts = record.collection;
    const ended = counts ? counts.done + counts.failed + counts.canceled : 0;
    const percent =
      record.status === 'running' && counts?.children ? Math.round((100 * ended) / counts.children) : undefined;
    return { name: record.status === 'expanding' ? 'listing entries' : record.status, detail: '', percent };
  }
  if (record.status !== 'running') {
    job.samples = [];
    return { name: record.status, detail: '' };
  }
  const progress = record.progress;
  if (!progress) return { name: 'downloading', detail: 'starting', percent: null };
  const { bytes_done: done, bytes_total: total } = progress;
  if (total && done >= total) return { name: 'converting', detail: `${formatBytes(total)} downloaded`, percent: null };
  const now = performance.now();
  job.samples = [...job.samples.filter((sample) => now - sample.at <= SPEED_WINDOW_MS && sample.bytes <= done)];
  job.samples.push({ at: now, bytes: done });
  const first = job.samples[0];
  const seconds = (now - first.at) / 1000;
  const speed = seconds >= 0.5 ? (done - first.bytes) / seconds : null;
  const parts = [total ? `${formatBytes(done)} of ${formatBytes(total)}` : `${formatBytes(done)} received`];
  if (speed !== null) parts.push(`${formatBytes(speed)}/s`);
  if (speed && total) parts.push(`${formatDuration((total - done) / speed)} left`);
  return { name: 'downloading', detail: parts.join(' · '), percent: progress.percent };
}

/** Submitted at, and how long it took once it ended. */
function showTimes(element, record) {
  const field = element.querySelector('[data-field="times"]');
  const created = new Date(record.created_at);
  if (Number.isNaN(created.getTime())) {
    field.replaceChildren();
    return;
  }
  const sameDay = created.toDateString() === new Date().toDateString();
  const at = el('time', {
    datetime: record.created_at,
    text: sameDay ? created.toLocaleTimeString() : created.toLocaleString(),
  });
  const parts = ['Submitted ', at];
  const finished = record.finished_at ? new Date(record.finished_at) : null;
  if (record.born_done) parts.push(', already stored: nothing downloaded');
  else if (finished && FINAL.has(record.status))
    parts.push(`, took ${formatDuration((finished.getTime() - created.getTime()) / 1000)}`);
  field.replaceChildren(...parts);
}

async function cancelJob(id) {
  try {
    const response = await api(`/jobs/${encodeURIComponent(id)}/cancel`, { method: 'POST' });
    if (response.ok) update(await response.json());
    else showJobProblem(id, await problemText(response));
  } catch (err) {
    if (!(err instanceof Unauthorized)) showJobProblem(id, `Could not cancel: ${err.message}`);
  }
}

/** Retry: the URL submitted again; its new job takes the failed one's place in the list. */
/** Submits a job's URL again in its place; `asCollection`: as a whole playlist (the service's own entry limit). */
async function retryJob(id, { asCollection = false } = {}) {
  const old = jobs.get(id);
  if (!old?.record) return;
  const playlist =
    old.record.kind === 'collection' ? { max_items: old.record.collection.max_items } : asCollection ? {} : null;
  try {
    const response = await api('/sources', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: old.record.url, ...(playlist ? { playlist } : {}) }),
    });
    if (!response.ok) {
      showJobProblem(id, `Could not retry: ${await problemText(response)}`);
      return;
    }
    const record = await response.json();
    const hadFocus = old.element.contains(document.activeElement);
    const job = jobs.get(record.job_id) ?? addJob(record.job_id, record);
    old.element.replaceWith(job.element);
    removeJob(id);
    update(record);
    saveList();
    syncStream();
    announce(`${nameOf(record)}: submitted again.`);
    if (hadFocus) job.element.querySelector('.job-title').focus();
  } catch (err) {
    if (!(err instanceof Unauthorized)) showJobProblem(id, `Could not retry: ${err.message}`);
  }
}

$('cancel-all').addEventListener('click', async () => {
  // A collection's children are canceled with it.
  const ids = [...jobs.entries()]
    .filter(([, job]) => !job.parentId && job.record && !FINAL.has(job.record.status))
    .map(([id]) => id);
  announce(`Canceling ${ids.length} job${ids.length === 1 ? '' : 's'}…`);
  let next = 0;
  const lane = async () => {
    while (next < ids.length) await cancelJob(ids[next++]);
  };
  await Promise.all(Array.from({ length: Math.min(CANCELS_AT_ONCE, ids.length) }, lane));
  announce(`${ids.length} job${ids.length === 1 ? '' : 's'} canceled.`);
});

$('clear-finished').addEventListener('click', () => {
  const ids = [...jobs.entries()].filter(([, job]) => !job.parentId && FINAL.has(job.record?.status)).map(([id]) => id);
  for (const id of ids) removeJob(id);
  saveList();
  updateList();
  $('jobs-heading').focus();
  announce(`${ids.length} finished job${ids.length === 1 ? '' : 's'} removed from the list.`);
});

// --- The event stream: every job of the page over one connection (GET /events) ---------------
// Read with fetch() and a stream reader, since EventSource cannot send the key in a header.

/** The stream open now: its jobs and its AbortController; null when none is open. */
let stream = null;
let reconnectTimer;

const underWay = (id) => !FINAL.has(jobs.get(id)?.record?.status);

/**
 * The jobs the page waits on: those whose state is not known yet, or not final; the listed jobs
 * first, then collections' children, at most MAX_JOBS (the most one stream carries). Children past
 * that get their states from their collection's items, read again at each of its counts' change.
 */
function wantedIds() {
  trimList();
  const listed = listedIds();
  const children = listed.flatMap((id) => [...(jobs.get(id)?.entries?.children ?? [])]);
  return [...listed, ...children].filter(underWay).slice(0, MAX_JOBS);
}

function stopStream() {
  clearTimeout(reconnectTimer);
  stream?.controller.abort();
  stream = null;
}

/**
 * Opens the stream the page needs, once: when a job is added that the open stream does not
 * carry, it is replaced by one that carries every job still under way. Jobs that end, or leave
 * the list, need no new stream.
 */
function syncStream() {
  if (!apiKey()) return;
  const wanted = wantedIds();
  if (stream && wanted.every((id) => stream.ids.has(id))) return;
  // Children waiting for a place in a full stream: it is replaced once half of its jobs have ended,
  // not at each child's end.
  if (stream && wanted.length === MAX_JOBS && [...stream.ids].filter(underWay).length > MAX_JOBS / 2) return;
  stopStream();
  if (wanted.length === 0) return;
  const current = { ids: new Set(wanted), controller: new AbortController() };
  stream = current;
  void readEvents(wanted, current.controller.signal).then(
    (retryAfterMs) => streamEnded(current, retryAfterMs),
    (err) => {
      if (err instanceof Unauthorized || current.controller.signal.aborted) return;
      streamEnded(current, RECONNECT_MS);
    },
  );
}

/** The stream ended (its jobs all ended, or it failed): another follows if jobs are still wanted. */
function streamEnded(ended, retryAfterMs) {
  if (stream !== ended) return;
  stream = null;
  if (retryAfterMs === 0) syncStream();
  else reconnectTimer = setTimeout(syncStream, retryAfterMs);
}

/**
 * Reads the stream of `ids` until it ends. Returns how long to wait before opening the next
 * (0 once the server has ended it: its jobs have all ended, or some ids were unknown and are
 * forgotten).
 */
async function readEvents(ids, signal) {
  const response = await api(`/events?jobs=${ids.map(encodeURIComponent).join(',')}`, {
    headers: { accept: 'text/event-stream' },
    signal,
  });
  if (response.status === 404) {
    const problem = await response.json().catch(() => ({}));
    const unknown = Array.isArray(problem.job_ids) ? problem.job_ids : [];
    // Jobs the service does not know (another service, or its data reset): no longer listed.
    for (const id of unknown) removeJob(id);
    saveList();
    updateList();
    return unknown.length > 0 ? 0 : RECONNECT_MS;
  }
  if (response.status === 429) {
    announce(`Following jobs: ${await problemText(response)}; trying again shortly.`);
    return Number(response.headers.get('retry-after') ?? 5) * 1000;
  }
  if (!response.ok) throw new Error(await problemText(response));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (event !== 'job' || data.length === 0 || signal.aborted) continue;
      const record = JSON.parse(data.join('\n'));
      // A job removed from the list meanwhile stays removed.
      if (jobs.has(record.job_id)) update(record);
    }
  }
  // Ended by the server: at once again if some of its jobs have not ended (a node's shutdown).
  return ids.some((id) => jobs.has(id) && !FINAL.has(jobs.get(id).record?.status)) ? RECONNECT_MS : 0;
}

// --- A finished job: player, waveform, facts ------------------------------------------------

function formatTime(seconds) {
  if (!Number.isFinite(seconds)) return '0:00';
  const whole = Math.floor(seconds);
  const h = Math.floor(whole / 3600);
  const m = Math.floor((whole % 3600) / 60);
  const s = String(whole % 60).padStart(2, '0');
  return h ? `${h}:${String(m).padStart(2, '0')}:${s}` : `${m}:${s}`;
}

/** A length of time in words: "12 s", "3 min 5 s", "1 h 2 min". */
function formatDuration(seconds) {
  const whole = Math.max(0, Math.round(seconds));
  if (whole < 60) return `${whole} s`;
  const m = Math.floor(whole / 60);
  if (m < 60) return `${m} min ${whole % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function formatBytes(bytes) {
  if (bytes < 1024) return `${Math.round(bytes)} B`;
  const units = ['KiB', 'MiB', 'GiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

/** audiowaveform's JSON (version 1 or 2) as wavesurfer's peaks: one array per channel, -1..1. */
function peaksOf(json) {
  const channels = json.version === 2 ? json.channels : 1;
  const scale = 2 ** ((json.bits ?? 16) - 1);
  const out = Array.from({ length: channels }, () => new Float32Array(json.length * 2));
  for (let pixel = 0; pixel < json.length; pixel++) {
    for (let c = 0; c < channels; c++) {
      const at = (pixel * channels + c) * 2;
      out[c][pixel * 2] = json.data[at] / scale;
      out[c][pixel * 2 + 1] = json.data[at + 1] / scale;
    }
  }
  return out;
}

/** The name a downloaded WAV is saved under: the service's `download_name`, else audio.wav. */
function downloadNameOf(artifact) {
  const name = typeof artifact.download_name === 'string' ? artifact.download_name.trim() : '';
  return name || 'audio.wav';
}

function showResult(job, record) {
  const wav = record.result?.artifacts.find((artifact) => artifact.name === 'audio.wav');
  if (!wav) return;
  job.shown = true;
  const peaksArtifact = record.result.artifacts.find((artifact) => artifact.name === 'peaks.json');
  const container = job.element.querySelector('.job-result');
  const title = job.element.querySelector('.job-title').id;
  // Absolute, as the element reports it: wavesurfer then keeps the element's source as it is.
  const src = new URL(wav.signed_url, location.href).href;
  const duration = wav.duration ?? 0;
  // With its duration known, the WAV is read only when played.
  const audio = el('audio', {
    controls: '',
    preload: wav.duration ? 'none' : 'metadata',
    'aria-labelledby': title,
    src,
  });
  const waveform = el('div', {
    class: 'waveform',
    role: 'slider',
    tabindex: '0',
    'aria-label': 'Waveform: position in the audio',
    'aria-valuemin': '0',
    'aria-valuemax': String(Math.round(duration)),
    'aria-valuenow': '0',
    'aria-valuetext': `0:00 of ${formatTime(duration)}`,
  });
  const loudness = record.result.loudness;
  const facts = el(
    'dl',
    { class: 'facts' },
    ...fact('Duration', formatTime(wav.duration ?? NaN)),
    ...fact('Sample rate', wav.sample_rate ? `${wav.sample_rate} Hz` : 'unknown'),
    ...fact('Channels', wav.channels ? String(wav.channels) : 'unknown'),
    ...fact(
      'Loudness',
      loudness
        ? `${loudness.integrated_lufs.toFixed(1)} LUFS, range ${loudness.range_lu.toFixed(1)} LU, true peak ${loudness.true_peak_dbtp.toFixed(1)} dBTP`
        : 'not measured',
    ),
    ...fact('Size', formatBytes(wav.bytes)),
  );
  const download = el('a', {
    class: 'download',
    href: wav.signed_url,
    download: downloadNameOf(wav),
    'aria-describedby': title,
    text: 'Download WAV',
  });
  container.append(audio, waveform, facts, download);

  const seek = (seconds) => {
    const end = Number.isFinite(audio.duration) ? audio.duration : duration;
    audio.currentTime = Math.max(0, Math.min(end, seconds));
  };
  waveform.addEventListener('keydown', (event) => {
    const now = audio.currentTime;
    const step = {
      ArrowRight: SEEK_STEP_S,
      ArrowUp: SEEK_STEP_S,
      ArrowLeft: -SEEK_STEP_S,
      ArrowDown: -SEEK_STEP_S,
      PageUp: SEEK_PAGE_S,
      PageDown: -SEEK_PAGE_S,
    }[event.key];
    if (step !== undefined) seek(now + step);
    else if (event.key === 'Home') seek(0);
    else if (event.key === 'End') seek(Number.isFinite(audio.duration) ? audio.duration : duration);
    else if (event.key === ' ' || event.key === 'Enter') void (audio.paused ? audio.play() : audio.pause());
    else return;
    event.preventDefault();
    // The focus ring shows while keys steer the slider, also when a click gave it the focus:
    // Firefox, unlike Chromium, keeps :focus-visible off for keys pressed after that click.
    waveform.dataset.keyboard = 'true';
  });
  const mouseSteers = () => delete waveform.dataset.keyboard;
  waveform.addEventListener('pointerdown', mouseSteers);
  waveform.addEventListener('blur', mouseSteers);
  const showPosition = () => {
    waveform.setAttribute('aria-valuenow', String(Math.round(audio.currentTime)));
    waveform.setAttribute(
      'aria-valuetext',
      `${formatTime(audio.currentTime)} of ${formatTime(Number.isFinite(audio.duration) ? audio.duration : duration)}`,
    );
  };
  audio.addEventListener('timeupdate', showPosition);
  // At the start of a seek too: timeupdate comes only once the new position is decoded, which a
  // busy machine can take seconds over, and a newer seek cancels.
  audio.addEventListener('seeking', showPosition);

  const colour = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const options = {
    container: waveform,
    media: audio,
    height: 72,
    waveColor: colour('--border'),
    progressColor: colour('--accent'),
    cursorColor: colour('--text'),
    cursorWidth: 2,
    barWidth: 2,
    barGap: 1,
    barRadius: 1,
    normalize: true,
    dragToSeek: true,
  };
  const create = (extra) => {
    if (!job.element.isConnected) return;
    job.player = WaveSurfer.create({ ...options, ...extra });
    // Drawn and seekable: said for people (aria-busy) and for tests.
    waveform.setAttribute('aria-busy', 'true');
    job.player.on('ready', () => {
      waveform.removeAttribute('aria-busy');
      waveform.dataset.ready = 'true';
    });
  };
  const known = wav.duration ? { duration } : {};
  if (peaksArtifact) {
    // The service's own peaks: the WAV is not read for the waveform.
    fetch(peaksArtifact.signed_url)
      .then((response) => (response.ok ? response.json() : Promise.reject(new Error(`HTTP ${response.status}`))))
      .then((json) => create({ url: src, peaks: peaksOf(json), duration }))
      .catch(() => create({ url: src, peaks: [new Float32Array(2)], duration }));
  } else if (wav.bytes <= MAX_DECODED_BYTES) {
    // Content stored without peaks: wavesurfer fetches the WAV once, decodes it for the waveform
    // and plays it from that copy.
    create({ url: src, ...known });
  } else {
    // Too large to decode here: a flat line, still a seek bar.
    create({ url: src, peaks: [new Float32Array(2)], duration });
  }
}

function fact(name, value) {
  return [el('dt', { text: name }), el('dd', { text: value })];
}

if (apiKey()) startWithKey();
else showKeyForm();
