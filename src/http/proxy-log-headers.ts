import { isContentId } from '../store/layout.js';
import { ARTIFACT_ROUTE } from './route-template.js';

/**
 * For the reverse proxy's access log: the route template of every answer and, for artifacts,
 * the content id, in response headers that nginx logs and hides from clients
 * (nginx/templates/default.conf.template). Set on node's response before the answer exists, so
 * error answers carry them too.
 */
export const ROUTE_TEMPLATE_HEADER = 'X-Route-Template';
export const CONTENT_ID_HEADER = 'X-Content-Id';

export function proxyLogHeaders(route: string, params: { cid?: string }): Record<string, string> {
  const headers: Record<string, string> = { [ROUTE_TEMPLATE_HEADER]: route };
  if (route === ARTIFACT_ROUTE && params.cid !== undefined && isContentId(params.cid))
    headers[CONTENT_ID_HEADER] = params.cid;
  return headers;
}
