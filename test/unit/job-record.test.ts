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
