/**
 * Claiming work while there is room, for the job worker pool and the callback delivery worker:
 * one pass at a time; a wake during a pass runs one more pass after it, so no wake is lost and
 * no two passes claim at once.
 */
export interface ClaimLoop {
  /** Starts a pass, or asks for one more after the pass under way. */
  fill: () => void;
  /** The pass under way, if any (it never rejects). */
  current: () => Promise<void> | undefined;
}

export function createClaimLoop(options: {
  /** Whether to claim one more now (room left, not stopping). */
  hasRoom: () => boolean;
  /** Claims one and launches it; false when nothing is due. */
  claimOne: () => Promise<boolean>;
  stopping: () => boolean;
  onError: (err: unknown) => void;
}): ClaimLoop {
  let filling: Promise<void> | undefined;
  let fillAgain = false;
  function fill(): void {
    if (filling) {
      fillAgain = true;
      return;
    }
    filling = (async () => {
      while (options.hasRoom()) {
        if (!(await options.claimOne())) return;
      }
    })()
      .catch(options.onError)
      .finally(() => {
        filling = undefined;
        if (fillAgain && !options.stopping()) {
          fillAgain = false;
          fill();
        }
      });
  }
  return { fill, current: () => filling };
}
