/**
 * Receivers (URL origins) that gave no answer, backed off on their own, on this node: after a
 * failure the receiver is not tried for base × 2^(n−1) (n its failures in a row, capped at
 * MAX_RETRY_DELAY_MS); its first answer, whatever the status, ends it. Attempts that fail
 * together (those under way when the receiver went silent) count once: a failure while the
 * receiver is already backed off does not lengthen it.
 *
 * At most MAX_RECEIVERS are remembered; beyond that the longest-known one is forgotten (it starts
 * again from the base delay), so a client naming endless receivers cannot grow the map.
 */
import { MAX_RETRY_DELAY_MS } from './retry-schedule.js';

const MAX_RECEIVERS = 10_000;

export interface ReceiverBackoff {
  /** Until when the receiver is not to be tried; 0 when it may be tried now. */
  until(receiver: string, now: number): number;
  /** Records an attempt without an answer at `now`; returns until when the receiver is not tried. */
  failed(receiver: string, now: number): number;
  /** Records an answer: the receiver may be tried at once from now on. */
  answered(receiver: string): void;
}

export function createReceiverBackoff(baseMs: number): ReceiverBackoff {
  const receivers = new Map<string, { failures: number; until: number }>();
  return {
    until(receiver, now) {
      const state = receivers.get(receiver);
      return state && state.until > now ? state.until : 0;
    },
    failed(receiver, now) {
      const state = receivers.get(receiver) ?? { failures: 0, until: 0 };
      if (state.until <= now) {
        state.failures += 1;
        state.until = now + Math.round(Math.min(baseMs * 2 ** Math.min(state.failures - 1, 40), MAX_RETRY_DELAY_MS));
      }
      receivers.delete(receiver);
      receivers.set(receiver, state);
      if (receivers.size > MAX_RECEIVERS) receivers.delete(receivers.keys().next().value!);
      return state.until;
    },
    answered(receiver) {
      receivers.delete(receiver);
    },
  };
}

/**
 * The receiver of a callback URL, and the prefix every stored URL of it starts with: an http(s)
 * URL's href is its origin (scheme, host, explicit non-default port) followed by "/".
 */
export function receiverOf(url: string): string {
  return new URL(url).origin;
}
