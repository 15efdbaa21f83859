import { describe, expect, it } from 'vitest';
import type { UpstreamFailure } from '../../src/egress/guard.js';
import { explainByUpstream } from '../../src/jobs/fetch/upstream-failure.js';
import {
  connectionError,
  httpStatusCode,
  httpStatusError,
  JOB_ERROR_CODES,
  JOB_ERRORS,
  jobError,
  JobErrorCodeSchema,
} from '../../src/job-errors.js';

/** The closed list of job error codes, its sentences, and how a failure gets its code. */

describe('the list of job error codes', () => {
  it('has one plain sentence per code: a capital, one full stop at the end, no tool jargon', () => {
    for (const code of JOB_ERROR_CODES) {
      const { sentence } = JOB_ERRORS[code];
      expect(sentence, code).toMatch(/^[A-Z{].*\.$/);
      expect(sentence.slice(0, -1), code).not.toMatch(/\.\s/);
      expect(sentence, code).not.toMatch(/ERROR:|errno|ECONN|urlopen|stderr/i);
    }
  });

  it('keeps every code a client may have matched before it', () => {
    const before = [
      'downloader_missing',
      'converter_missing',
      'unsupported_url',
      'unsupported_protocol',
      'playlist_not_supported',
      'live_stream',
      'metadata_invalid',
      'http_error',
      'network_error',
      'destination_refused',
      'direct_connection_refused',
      'confinement_unavailable',
      'download_failed',
      'file_too_large',
      'duration_exceeded',
      'not_audio',
      'media_corrupt',
      'conversion_failed',
      'fetch_timeout',
      'storage_full',
      'key_storage_quota_exceeded',
      'attempts_exhausted',
      'internal_error',
      'memory_exceeded',
      'cpu_time_exceeded',
      'process_limit_exceeded',
      'output_too_large',
      'download_stalled',
      'metadata_timeout',
    ];
    expect(before.filter((code) => !JobErrorCodeSchema.safeParse(code).success)).toEqual([]);
    // The control: the enum is closed.
    expect(JobErrorCodeSchema.safeParse('something_else').success).toBe(false);
  });

  it('fills in the values of a sentence, and carries the detail and status', () => {
    expect(jobError('file_too_large', { values: { limit: 1000 }, detail: 'yt-dlp said so' })).toEqual({
      code: 'file_too_large',
      message: 'The download is larger than the limit of 1000 bytes.',
      detail: 'yt-dlp said so',
      httpStatus: null,
    });
    expect(jobError('internal_error')).toEqual({
      code: 'internal_error',
      message: 'The fetch failed for an internal reason.',
      detail: null,
      httpStatus: null,
    });
  });

  it.each([
    [404, 'http_not_found', 'Nothing was found at the source (HTTP 404).'],
    [401, 'http_access_denied', 'The source refused access to the media (HTTP 401).'],
    [403, 'http_access_denied', 'The source refused access to the media (HTTP 403).'],
    [410, 'http_gone', 'The media has been removed from the source (HTTP 410).'],
    [429, 'http_rate_limited', 'The source is refusing requests for now: too many were made (HTTP 429).'],
    [500, 'http_server_error', "The source's server failed to answer the request (HTTP 500)."],
    [503, 'http_server_error', "The source's server failed to answer the request (HTTP 503)."],
    [400, 'http_error', 'The source answered with an error (HTTP 400).'],
    [451, 'http_error', 'The source answered with an error (HTTP 451).'],
  ])('HTTP %i is %s', (status, code, message) => {
    expect(httpStatusCode(status)).toBe(code);
    expect(httpStatusError(status, 'ERROR: the words')).toEqual({
      code,
      message,
      detail: 'ERROR: the words',
      httpStatus: status,
    });
  });

  it('names the host of a name, the address of a connection', () => {
    expect(connectionError('host_not_found', 'gone.example', 80, null).message).toBe(
      'The host name gone.example does not exist.',
    );
    for (const host of ['2001:db8::1', '[2001:db8::1]']) {
      expect(connectionError('connect_timeout', host, 443, null).message).toBe(
        'The source [2001:db8::1]:443 did not accept the connection in time.',
      );
    }
    expect(connectionError('network_error', 'a.example', 80, 'reset').message).toBe(
      'The connection to the source failed.',
    );
  });
});

describe('what the egress guard saw explains the failure', () => {
  const failure = (code: UpstreamFailure['code'], host = 'origin.example', port = 8000): UpstreamFailure => ({
    host,
    port,
    code,
    message: 'the guard says',
  });
  const guards502 = httpStatusError(502, 'ERROR: HTTP Error 502: Bad Gateway');
  const tunnel502 = jobError('network_error', { detail: 'Tunnel connection failed: 502 Bad Gateway' });

  it("the guard's own 502, plain or as a tunnel: the cause it recorded, the downloader's words kept as detail", () => {
    expect(explainByUpstream(guards502, [failure('connection_refused')])).toEqual({
      code: 'connection_refused',
      message: 'The source origin.example:8000 refused the connection: no server is listening there.',
      detail: 'ERROR: HTTP Error 502: Bad Gateway',
      httpStatus: null,
    });
    expect(explainByUpstream(tunnel502, [failure('host_not_found', 'gone.example', 443)])).toMatchObject({
      code: 'host_not_found',
      message: 'The host name gone.example does not exist.',
      detail: 'Tunnel connection failed: 502 Bad Gateway',
    });
  });

  it('the last connection that failed, rather than one that was only waiting', () => {
    const failures = [
      failure('host_lookup_failed', 'a.example'),
      failure('connect_timeout', 'b.example'),
      failure('no_answer'),
    ];
    expect(explainByUpstream(guards502, failures)).toMatchObject({ code: 'connect_timeout' });
    expect(explainByUpstream(guards502, [failure('no_answer')])).toMatchObject({ code: 'no_answer' });
  });

  it('a time limit reached while the origin had not answered: no_answer, the limit as detail', () => {
    const timedOut = jobError('metadata_timeout', { values: { limit: 8 } });
    expect(explainByUpstream(timedOut, [failure('no_answer')])).toEqual({
      code: 'no_answer',
      message: 'The source origin.example:8000 accepted the connection but sent no answer.',
      detail: "Reading the media's metadata took longer than 8 s and was stopped.",
      httpStatus: null,
    });
    const stalled = jobError('download_stalled', { values: { bytes: 1, seconds: 30 } });
    expect(explainByUpstream(stalled, [failure('no_answer')]).code).toBe('no_answer');
    // A refused connection does not explain a wait.
    expect(explainByUpstream(timedOut, [failure('connection_refused')])).toBe(timedOut);
  });

  it('the controls: an answer from the origin itself, or nothing recorded, stays as it is', () => {
    const notFound = httpStatusError(404, 'ERROR: HTTP Error 404: Not Found');
    expect(explainByUpstream(notFound, [failure('connection_refused')])).toBe(notFound);
    const originsOwn502 = httpStatusError(502, 'ERROR: HTTP Error 502: Bad Gateway');
    expect(explainByUpstream(originsOwn502, [])).toBe(originsOwn502);
    const notAudio = jobError('not_audio', { detail: 'Invalid data found when processing input' });
    expect(explainByUpstream(notAudio, [failure('no_answer')])).toBe(notAudio);
  });
});
