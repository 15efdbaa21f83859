// The page for people (docs/web-page.md): asks for the API key once (session storage), submits
// URLs, follows each job's event stream, plays finished jobs with their waveform. Plain ES
// module, no build step; the waveform component is wavesurfer.js, served from its npm package.
import WaveSurfer from '/vendor/wavesurfer.js@8.0.1/wavesurfer.esm.js';

const KEY_STORAGE = 'source-fetch.api-key';
const JOBS_STORAGE = 'source-fetch.jobs';
/** Job ids remembered by this browser. */
const MAX_REMEMBERED = 50;
const FINAL = new Set(['done', 'failed', 'canceled']);
/** Without peaks.json the WAV is decoded in the browser for its waveform only up to this size. */
const MAX_DECODED_BYTES = 16 * 1024 * 1024;
/** A stream that ended early, or could not open, is opened again after this long. */
const RECONNECT_MS = 2000;
const SEEK_STEP_S = 5;
const SEEK_PAGE_S = 30;

const $ = (id) => document.getElementById(id);
const status = $('status');
/** job id → { element, record, stream (AbortController), player } */
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
  for (const id of [...jobs.keys()]) stopStream(id);
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

$('forget-key').addEventListener('click', () => {
  sessionStorage.removeItem(KEY_STORAGE);
  showKeyForm();
});

// --- Remembered jobs ----------------------------------------------------------------------

function rememberedIds() {
  try {
    const ids = JSON.parse(localStorage.getItem(JOBS_STORAGE) ?? '[]');
    return Array.isArray(ids) ? ids.filter((id) => typeof id === 'string') : [];
  } catch {
    return [];
  }
}

function remember(id) {
  const ids = [id, ...rememberedIds().filter((known) => known !== id)].slice(0, MAX_REMEMBERED);
  localStorage.setItem(JOBS_STORAGE, JSON.stringify(ids));
}

function forget(id) {
  localStorage.setItem(JOBS_STORAGE, JSON.stringify(rememberedIds().filter((known) => known !== id)));
}

function startWithKey() {
  $('key-section').hidden = true;
  $('submit-section').hidden = false;
  $('jobs-section').hidden = false;
  $('forget-key').hidden = false;
  const ids = rememberedIds();
  // Oldest first, each placed at the top: the newest ends first.
  for (const id of [...ids].reverse()) if (!jobs.has(id)) addJob(id, null);
  for (const id of ids) void refresh(id);
  updateEmpty();
}

async function refresh(id) {
  try {
    const response = await api(`/jobs/${encodeURIComponent(id)}`);
    if (response.status === 404) {
      forget(id);
      removeJob(id);
      return;
    }
    if (!response.ok) return showJobProblem(id, await problemText(response));
    update(await response.json());
  } catch (err) {
    if (!(err instanceof Unauthorized)) showJobProblem(id, `Could not read the job: ${err.message}`);
  }
}

// --- Submitting ---------------------------------------------------------------------------

$('submit-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const urls = $('urls')
    .value.split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const error = $('submit-error');
  error.textContent = '';
  if (urls.length === 0) {
    error.textContent = 'Enter at least one URL.';
    $('urls').focus();
    return;
  }
  const button = $('submit-button');
  button.disabled = true;
  try {
    const single = urls.length === 1;
    const response = await api(single ? '/sources' : '/sources/batch', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(single ? { url: urls[0] } : { urls }),
    });
    if (!response.ok) {
      error.textContent = await problemText(response);
      return;
    }
    const body = await response.json();
    const items = single ? [{ outcome: 'accepted', url: urls[0], job: body }] : body.results;
    const refused = [];
    for (const item of items) {
      if (item.outcome === 'accepted') {
        remember(item.job.job_id);
        update(item.job);
      } else {
        refused.push(`${item.url}: ${item.problem.detail ?? item.problem.title} (${item.problem.code})`);
      }
    }
    const accepted = items.length - refused.length;
    error.textContent = refused.length ? `Refused: ${refused.join('; ')}` : '';
    if (accepted > 0) $('urls').value = refused.length ? refused.map((line) => line.split(': ')[0]).join('\n') : '';
    announce(`${accepted} job${accepted === 1 ? '' : 's'} submitted${refused.length ? `, ${refused.length} refused` : ''}.`);
  } catch (err) {
    if (!(err instanceof Unauthorized)) error.textContent = `Could not submit: ${err.message}`;
  } finally {
    button.disabled = false;
  }
});

// --- Jobs ---------------------------------------------------------------------------------

function updateEmpty() {
  $('no-jobs').hidden = jobs.size > 0;
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === 'text') node.textContent = value;
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

function addJob(id, record) {
  const headingId = `job-${id}-title`;
  const element = el(
    'li',
    { class: 'job', 'data-job-id': id, 'aria-labelledby': headingId },
    el('h3', { id: headingId, class: 'job-url', text: record?.url ?? id }),
    el('p', { class: 'job-state' }, el('span', { class: 'badge', 'data-field': 'status', text: 'loading' }), el('span', { 'data-field': 'detail' })),
    el('progress', { max: '100', 'aria-label': 'Progress', hidden: '' }),
    el('p', { class: 'problem', 'data-field': 'error', hidden: '' }),
    el('div', { class: 'job-actions' }),
    el('div', { class: 'job-result' }),
  );
  const cancel = el('button', { type: 'button', class: 'cancel', hidden: '', 'aria-describedby': headingId, text: 'Cancel' });
  cancel.addEventListener('click', () => void cancelJob(id, cancel));
  element.querySelector('.job-actions').append(cancel);
  $('jobs').prepend(element);
  const job = { element, record: null, stream: null, player: null };
  jobs.set(id, job);
  updateEmpty();
  return job;
}

function removeJob(id) {
  const job = jobs.get(id);
  if (!job) return;
  stopStream(id);
  job.player?.destroy();
  job.element.remove();
  jobs.delete(id);
  updateEmpty();
}

function showJobProblem(id, text) {
  const field = jobs.get(id)?.element.querySelector('[data-field="error"]');
  if (!field) return;
  field.textContent = text;
  field.hidden = false;
}

/** Shows a job record (from a GET, a submit or an event). */
function update(record) {
  const id = record.job_id;
  const job = jobs.get(id) ?? addJob(id, record);
  const before = job.record?.status;
  job.record = record;
  const { element } = job;
  element.dataset.status = record.status;
  element.querySelector('.job-url').textContent = record.url;
  element.querySelector('[data-field="status"]').textContent = record.status;
  const progress = element.querySelector('progress');
  const percent = record.progress?.percent;
  const detail = element.querySelector('[data-field="detail"]');
  if (record.status === 'running' && typeof percent === 'number') {
    progress.hidden = false;
    progress.value = percent;
    progress.setAttribute('aria-valuetext', `${percent} %`);
    detail.textContent = `${percent} %`;
  } else if (record.status === 'running' && record.progress) {
    progress.hidden = false;
    progress.removeAttribute('value');
    detail.textContent = `${formatBytes(record.progress.bytes_done)} received`;
  } else {
    progress.hidden = true;
    detail.textContent = '';
  }
  const error = element.querySelector('[data-field="error"]');
  error.hidden = !record.error;
  error.textContent = record.error ? `${record.error.message} (${record.error.code})` : '';
  element.querySelector('.cancel').hidden = FINAL.has(record.status);
  if (record.status === 'done' && !job.player) showResult(job, record);
  if (record.status === 'done' && record.result?.evicted) showJobProblem(id, record.result.evicted.message);
  if (FINAL.has(record.status)) stopStream(id);
  else if (!job.stream) followEvents(id);
  if (before && before !== record.status) {
    announce(`${record.url}: ${record.status}${record.error ? `: ${record.error.message}` : ''}`);
  }
}

async function cancelJob(id, button) {
  button.disabled = true;
  try {
    const response = await api(`/jobs/${encodeURIComponent(id)}/cancel`, { method: 'POST' });
    if (response.ok) update(await response.json());
    else showJobProblem(id, await problemText(response));
  } catch (err) {
    if (!(err instanceof Unauthorized)) showJobProblem(id, `Could not cancel: ${err.message}`);
  } finally {
    button.disabled = false;
  }
}

// --- Event streams (fetch, since EventSource cannot send the key in a header) ---------------

function stopStream(id) {
  const job = jobs.get(id);
  job?.stream?.abort();
  if (job) job.stream = null;
}

function followEvents(id) {
  const job = jobs.get(id);
  const controller = new AbortController();
  job.stream = controller;
  void readEvents(id, controller.signal).then(
    () => reconnect(id, controller),
    (err) => {
      if (err instanceof Unauthorized || controller.signal.aborted) return;
      reconnect(id, controller);
    },
  );
}

function reconnect(id, controller) {
  const job = jobs.get(id);
  if (!job || job.stream !== controller || controller.signal.aborted) return;
  job.stream = null;
  if (FINAL.has(job.record?.status)) return;
  // The stream ended or failed before the job did: read the record, then follow it again.
  setTimeout(() => {
    if (jobs.get(id) === job && !job.stream) void refresh(id);
  }, RECONNECT_MS);
}

async function readEvents(id, signal) {
  const job = jobs.get(id);
  const response = await api(`/jobs/${encodeURIComponent(id)}/events`, {
    headers: { accept: 'text/event-stream' },
    signal,
  });
  if (!response.ok) throw new Error(await problemText(response));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
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
      if (event === 'job' && data.length && jobs.get(id) === job) update(JSON.parse(data.join('\n')));
    }
  }
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

function formatBytes(bytes) {
  if (bytes < 1024) return `${bytes} B`;
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

function showResult(job, record) {
  const wav = record.result?.artifacts.find((artifact) => artifact.name === 'audio.wav');
  if (!wav) return;
  const peaksArtifact = record.result.artifacts.find((artifact) => artifact.name === 'peaks.json');
  const container = job.element.querySelector('.job-result');
  const title = job.element.querySelector('.job-url').id;
  // Absolute, as the element reports it: wavesurfer then keeps the element's source as it is.
  const src = new URL(wav.signed_url, location.href).href;
  const audio = el('audio', { controls: '', preload: 'metadata', 'aria-labelledby': title, src });
  const waveform = el('div', {
    class: 'waveform',
    role: 'slider',
    tabindex: '0',
    'aria-label': 'Waveform: position in the audio',
    'aria-valuemin': '0',
    'aria-valuemax': String(Math.round(wav.duration ?? 0)),
    'aria-valuenow': '0',
    'aria-valuetext': `0:00 of ${formatTime(wav.duration ?? 0)}`,
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
  const download = el('a', { class: 'download', href: wav.signed_url, download: 'audio.wav', text: 'Download WAV' });
  container.append(audio, waveform, facts, download);

  const duration = wav.duration ?? 0;
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
  if (peaksArtifact) {
    // The service's own peaks: the WAV is not read for the waveform.
    fetch(peaksArtifact.signed_url)
      .then((response) => (response.ok ? response.json() : Promise.reject(new Error(`HTTP ${response.status}`))))
      .then((json) => create({ url: src, peaks: peaksOf(json), duration }))
      .catch(() => create({ url: src, peaks: [new Float32Array(2)], duration }));
  } else if (wav.bytes <= MAX_DECODED_BYTES) {
    // Content stored without peaks: wavesurfer fetches the WAV once, decodes it for the waveform
    // and plays it from that copy.
    create({ url: src });
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
