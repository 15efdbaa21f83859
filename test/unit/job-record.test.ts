import { describe, expect, it } from 'vitest';
import type { CacheEntryRow, JobRow } from '../../src/db/database.js';
import { createJobRenderer } from '../../src/http/job-record.js';
import type { JobView } from '../../src/jobs/job-service.js';

const job = {
  id: 'job-1',
  status: 'done',
  url: 'https://m.example/a',
  bornDone: false,
  createdAt: 1_000,
  startedAt: 2_000,
  finishedAt: 3_000,
  attempts: 1,
  contentId: 'c'.repeat(64),
} as JobRow;
const artifact = {
  contentId: 'c'.repeat(64),
  name: 'audio.wav',
  bytes: 100,
  contentType: 'audio/wav',
  sampleRate: 44100,
  channels: 2,
  durationS: 1,
} as CacheEntryRow;
const view = (): JobView => Object.freeze({ job, leader: undefined, artifacts: [artifact], callback: undefined });

/** Signed with the clock's whole second, as the URL signer does. */
function renderer() {
  let clock = 10_000_250;
  const signs: number[] = [];
  const render = createJobRenderer(
    (cid, name) => {
      const expires = Math.floor(clock / 1000) + 60;
      signs.push(expires);
      return { query: `expires=${expires}&sig=${cid.slice(0, 4)}${name}`, expiresAt: expires * 1000 };
    },
    () => clock,
  );
  return { render, signs, tick: (ms: number) => (clock += ms) };
}

describe('the job renderer', () => {
  it('renders one kept view to one record within a second, and signs again in the next', () => {
    const { render, signs, tick } = renderer();
    const kept = view();
    const first = render(kept);
    expect(first.result?.artifacts[0]?.signed_url).toBe(
      `/artifacts/${'c'.repeat(64)}/audio.wav?expires=10060&sig=ccccaudio.wav`,
    );
    tick(700);
    expect(render(kept)).toBe(first);
    expect(signs).toEqual([10_060]);

    tick(100);
    const next = render(kept);
    expect(next).not.toBe(first);
    expect(next.result?.artifacts[0]?.signed_url_expires_at).toBe(new Date(10_061_000).toISOString());
    expect(signs).toEqual([10_060, 10_061]);
  });

  it('renders each new view anew, even in the same second (a view read again may differ)', () => {
    const { render, signs } = renderer();
    const first = render(view());
    const second = render(view());
    expect(second).not.toBe(first);
    expect(second).toEqual(first);
    expect(signs).toHaveLength(2);
  });

  it('remembers nothing of a view that was not kept (not frozen: PostgreSQL reads every poll)', () => {
    const { render, signs } = renderer();
    const read = { job, leader: undefined, artifacts: [artifact], callback: undefined };
    const first = render(read);
    expect(render(read)).not.toBe(first);
    expect(Object.isFrozen(first)).toBe(false);
    expect(signs).toHaveLength(2);
    // Control: the same view, kept, is rendered once and its record frozen.
    const kept = Object.freeze({ ...read });
    expect(render(kept)).toBe(render(kept));
    expect(Object.isFrozen(render(kept))).toBe(true);
  });
});

describe("the record's source metadata and download names", () => {
  const peaks = { ...artifact, name: 'peaks.json', contentType: 'application/json' };
  const media = {
    extractor: 'Generic',
    id: 'tone',
    title: 'AC/DC: "Live" – שיר 🎵',
    artist: 'Art',
    album: null,
    track: null,
    duration: null,
    upload_date: '2026-11-30',
    webpage_url: 'http://127.0.0.1:8000/tone.mp3',
  };
  /** Records what each artifact was signed with. */
  function signing() {
    const signed: Array<[string, string | undefined]> = [];
    const render = createJobRenderer(
      (cid, name, filename) => {
        signed.push([name, filename]);
        return {
          query: `expires=1&sig=s${filename === undefined ? '' : `&filename=${encodeURIComponent(filename)}`}`,
          expiresAt: 1000,
        };
      },
      () => 0,
    );
    return { render, signed };
  }

  it("shows the job's media, names each artifact from its title, and signs each URL with that name", () => {
    const { render, signed } = signing();
    const record = render({
      job: { ...job, media: JSON.stringify(media) },
      leader: undefined,
      artifacts: [artifact, peaks],
      callback: undefined,
    });
    expect(record.media).toEqual(media);
    const names = ['AC_DC_ _Live_ – שיר 🎵.wav', 'AC_DC_ _Live_ – שיר 🎵.peaks.json'];
    expect(record.result?.artifacts.map((a) => a.download_name)).toEqual(names);
    expect(signed).toEqual([
      ['audio.wav', names[0]],
      ['peaks.json', names[1]],
    ]);
    expect(record.result?.artifacts[0]?.signed_url).toBe(
      `/artifacts/${'c'.repeat(64)}/audio.wav?expires=1&sig=s&filename=${encodeURIComponent(names[0]!)}`,
    );
  });

  it('without a title, names each artifact as itself and signs it without a name; a job recorded before media was kept shows its extractor and id', () => {
    const { render, signed } = signing();
    const record = render({
      job: { ...job, media: null, extractor: 'Generic', mediaId: 'tone' },
      leader: undefined,
      artifacts: [artifact, peaks],
      callback: undefined,
    });
    expect(record.media).toEqual({
      extractor: 'Generic',
      id: 'tone',
      title: null,
      artist: null,
      album: null,
      track: null,
      duration: null,
      upload_date: null,
      webpage_url: null,
    });
    expect(record.result?.artifacts.map((a) => a.download_name)).toEqual(['audio.wav', 'peaks.json']);
    expect(signed).toEqual([
      ['audio.wav', undefined],
      ['peaks.json', undefined],
    ]);
    // Nothing known at all (queued): no media.
    expect(
      render({
        job: { ...job, status: 'queued', media: null, extractor: null, mediaId: null },
        leader: undefined,
        artifacts: [],
        callback: undefined,
      }).media,
    ).toBeNull();
  });
});
