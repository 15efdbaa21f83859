import { createRoute, z } from '@hono/zod-openapi';
import { ServiceError } from '../../errors.js';
import type { ScrubPass, ScrubReport, Scrubber } from '../../store/scrubber.js';
import { apiKeySecurity as security, commonErrorResponses, problemResponseSpec } from '../error-responses.js';
import type { KeyAdmission } from '../key-admission.js';
import type { Answer } from '../answer.js';
import { bindOperation, jsonAnswer, type ApiRequest, type OperationBinding } from '../operation.js';
import { validationError } from '../problem.js';
import { ScrubReportSchema, type ScrubReportRecord } from '../schemas.js';

/** The longest a request waits for a pass to end: below nginx's proxy_read_timeout (60 s). */
export const MAX_SCRUB_WAIT_S = 50;

const WaitQuery = z.object({
  wait_s: z.coerce
    .number()
    .int()
    .min(0)
    .max(MAX_SCRUB_WAIT_S)
    .default(25)
    .openapi({
      description: `Seconds to wait for the pass to end before answering 202 with the report so far (0 to ${MAX_SCRUB_WAIT_S}).`,
      example: 25,
    }),
});

const report = (description: string) => ({
  description,
  content: { 'application/json': { schema: ScrubReportSchema } },
});

export const scrubStoreRoute = createRoute({
  operationId: 'scrubStore',
  method: 'post',
  path: '/store/scrub',
  summary:
    'Check every stored artifact against its content id now; corrupt ones leave the store for the quarantine folder.',
  description: [
    'Starts a scrub pass on this node, or joins the one running here, and answers its report once it ends, or after `wait_s` with',
    'the report so far (202; follow it with getStoreScrub on the same node). Every stored file is read (at SCRUB_BYTES_PER_S) and',
    'its SHA-256 compared with its content id; a corrupt one is moved to DATA_DIR/quarantine, and its cache row and aliases are',
    'dropped, so its artifact answers 404 and the next submission of its URL downloads it again.',
  ].join(' '),
  security,
  request: { query: WaitQuery },
  responses: {
    200: report('The pass has ended (done, failed or stopped): its report.'),
    202: report('The pass runs on: its report so far.'),
    409: problemResponseSpec('Another node is scrubbing the store (`scrub_running_elsewhere`, with its `node_id`).'),
    ...commonErrorResponses,
  },
});

export const getStoreScrubRoute = createRoute({
  operationId: 'getStoreScrub',
  method: 'get',
  path: '/store/scrub',
  summary: "This node's scrub pass: the one running, or else the last one that ended.",
  security,
  request: { query: WaitQuery },
  responses: {
    200: report('The last pass has ended: its report.'),
    202: report('A pass runs on (waited for up to `wait_s`): its report so far.'),
    404: problemResponseSpec('No scrub pass has run on this node since it started (`scrub_not_found`).'),
    ...commonErrorResponses,
  },
});

/** The seconds a request waits for its pass (`wait_s`): 400 validation_failed unless 0 to MAX_SCRUB_WAIT_S. */
function waitOf(request: ApiRequest): number {
  const result = WaitQuery.safeParse({ wait_s: request.query('wait_s') });
  if (!result.success) throw validationError(result.error);
  return result.data.wait_s;
}

/** The pass's report once it ends within `waitS` (200), else as it stands then (202). */
async function answerReport(pass: ScrubPass, waitS: number): Promise<Answer> {
  const report = await reportWithin(pass, waitS);
  return jsonAnswer(report.status === 'running' ? 202 : 200, JSON.stringify(renderScrubReport(report)));
}

/** scrubStore and getStoreScrub. */
export function storeOperations(deps: {
  scrubber: Pick<Scrubber, 'request' | 'latest'>;
  admission: KeyAdmission;
}): OperationBinding[] {
  return [
    bindOperation(scrubStoreRoute, {
      async answer(request) {
        deps.admission.admit(request);
        const waitS = waitOf(request);
        return answerReport(await deps.scrubber.request(), waitS);
      },
    }),
    bindOperation(getStoreScrubRoute, {
      async answer(request) {
        deps.admission.admit(request);
        const waitS = waitOf(request);
        const pass = deps.scrubber.latest();
        if (!pass)
          throw new ServiceError(
            'not_found',
            'scrub_not_found',
            'No scrub pass has run on this node since it started.',
          );
        return answerReport(pass, waitS);
      },
    }),
  ];
}

/** The final report if the pass ends within `waitS`, else the report as it stands then. */
async function reportWithin(pass: ScrubPass, waitS: number): Promise<ScrubReport> {
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, waitS * 1000)));
  try {
    return (await Promise.race([pass.ended, waited])) ?? pass.report();
  } finally {
    clearTimeout(timer);
  }
}

export function renderScrubReport(report: ScrubReport): ScrubReportRecord {
  const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
  return {
    pass_id: report.passId,
    node_id: report.nodeId,
    trigger: report.trigger,
    status: report.status,
    started_at: new Date(report.startedAt).toISOString(),
    finished_at: iso(report.finishedAt),
    checked: report.checked,
    bytes_read: report.bytesRead,
    corrupt: report.corrupt,
    moved: report.moved,
    missing: report.missing,
    unreadable: report.unreadable,
    findings: report.findings.map((finding) => ({
      content_id: finding.contentId,
      name: finding.name,
      problem: finding.problem,
      sha256: finding.sha256,
      error: finding.error,
      action: finding.action,
      quarantined_as: finding.quarantinedAs,
    })),
    findings_omitted: report.corrupt + report.missing + report.unreadable - report.findings.length,
    error: report.error,
  };
}
