import type { Job } from './api.js';

/**
 * What `fetch` shows while a job runs. On a terminal: one line redrawn in place, a bar for the
 * download percentage, then "converting". Elsewhere (a pipe, a file, CI logs): plain lines, one
 * per phase and one per 10 % of the download, no escape codes.
 */
export type Phase = 'queued' | 'starting' | 'downloading' | 'converting' | 'done' | 'failed' | 'canceled';

export interface Output {
  write(text: string): void;
  /** Terminal width, when stdout is a terminal. */
  columns?: number;
}

export interface ProgressView {
  job(job: Job): void;
  /** Bytes of the artifact written so far, of `total` when known. */
  saving(bytes: number, total: number | null): void;
  /** Ends the redrawn line, if any, before other output. */
  finish(): void;
}

/** The job's phase, as far as its record tells: a download at 100 % is being converted. */
export function phaseOf(job: Job): Phase {
  // A collection's listing (the CLI submits no collection itself).
  if (job.status === 'expanding') return 'starting';
  if (job.status !== 'running') return job.status;
  const progress = job.progress;
  if (!progress) return 'starting';
  const complete =
    progress.percent !== null
      ? progress.percent >= 100
      : progress.bytes_total !== null && progress.bytes_done >= progress.bytes_total;
  return complete ? 'converting' : 'downloading';
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

function bar(percent: number, width: number): string {
  const filled = Math.round((Math.max(0, Math.min(100, percent)) / 100) * width);
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}]`;
}

const PHASE_LABEL: Record<Phase, string> = {
  queued: 'queued',
  starting: 'starting',
  downloading: 'downloading',
  converting: 'converting',
  done: 'done',
  failed: 'failed',
  canceled: 'canceled',
};

export function createTerminalView(out: Output): ProgressView {
  let drawn: string | undefined;
  // A pseudo-terminal may report no width (0): assume 80 columns.
  const width = () => Math.max(10, Math.min(40, (out.columns || 80) - 45));
  const draw = (text: string) => {
    if (text === drawn) return;
    // \r and erase-line: the line is redrawn in place.
    out.write(`\r\x1b[2K${text}`);
    drawn = text;
  };
  return {
    job(job) {
      const phase = phaseOf(job);
      const progress = job.progress;
      if (phase === 'downloading' && progress) {
        const amount =
          progress.bytes_total !== null
            ? `${formatBytes(progress.bytes_done)} / ${formatBytes(progress.bytes_total)}`
            : formatBytes(progress.bytes_done);
        const percent = progress.percent;
        draw(
          percent !== null
            ? `downloading ${bar(percent, width())} ${percent.toFixed(1).padStart(5)}%  ${amount}`
            : `downloading ${amount}`,
        );
      } else if (phase === 'converting') {
        draw(`converting  ${bar(100, width())}  to a 44.1 kHz WAV…`);
      } else if (phase === 'queued' || phase === 'starting') {
        draw(`${PHASE_LABEL[phase]}…`);
      }
    },
    saving(bytes, total) {
      const percent = total ? (bytes / total) * 100 : null;
      draw(
        percent !== null
          ? `saving      ${bar(percent, width())} ${percent.toFixed(1).padStart(5)}%  ${formatBytes(bytes)}`
          : `saving ${formatBytes(bytes)}`,
      );
    },
    finish() {
      if (drawn !== undefined) out.write('\r\x1b[2K');
      drawn = undefined;
    },
  };
}

export function createPlainView(out: Output, jobId: string): ProgressView {
  let lastPhase: Phase | undefined;
  let lastDecile = -1;
  let savingShown = false;
  const line = (text: string) => out.write(`${text}\n`);
  return {
    job(job) {
      const phase = phaseOf(job);
      if (phase === 'downloading' && job.progress) {
        const percent = job.progress.percent;
        const decile = percent === null ? null : Math.floor(percent / 10);
        if (lastPhase !== 'downloading' || (decile !== null && decile > lastDecile)) {
          line(
            `job ${jobId}: downloading${percent === null ? ` ${formatBytes(job.progress.bytes_done)}` : ` ${Math.floor(percent)}%`}`,
          );
          if (decile !== null) lastDecile = decile;
        }
      } else if (phase !== lastPhase && phase !== 'done' && phase !== 'failed' && phase !== 'canceled') {
        line(`job ${jobId}: ${PHASE_LABEL[phase]}`);
      }
      lastPhase = phase;
    },
    saving() {
      if (!savingShown) line(`job ${jobId}: saving the WAV`);
      savingShown = true;
    },
    finish() {},
  };
}
