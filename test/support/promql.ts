/**
 * The metric names a PromQL expression reads, and the metric names a /metrics scrape offers: what
 * the tests compare so that every query of the alert rules and the Grafana dashboard names a
 * metric the service exports.
 */

const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'inf',
  'nan',
  'atan2',
]);

/** Grafana's variables, given values that parse: `$__rate_interval` and the like a duration, `$job` a name. */
function withoutGrafanaVariables(expr: string): string {
  return expr
    .replace(/\$__(?:rate_interval|interval|range)\b|\$\{__(?:rate_interval|interval|range)\}/g, '5m')
    .replace(/\$\{?\w+\}?/g, 'x');
}

/**
 * The metric names in `expr` (a PromQL expression, Grafana variables allowed): identifiers that
 * are neither functions nor aggregations (followed by `(`), keywords, label names (in `{}` and
 * in `by`/`without`/`on`/`ignoring`/`group_*` lists) nor durations; `{__name__="..."}` is not
 * read.
 */
export function metricNamesIn(expr: string): string[] {
  const text = withoutGrafanaVariables(expr)
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = [...text.matchAll(/(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()/g)].map((match) => match[1]!);
  return [...new Set(names.filter((name) => !KEYWORDS.has(name.toLowerCase())))];
}

/** The selector of a Grafana `label_values(<selector>, <label>)` variable query, else the query itself. */
export function grafanaVariableSelector(query: string): string {
  const m = /^\s*label_values\((.*),\s*\w+\s*\)\s*$/s.exec(query);
  return m ? m[1]! : query;
}

/**
 * Every sample name a scrape's families can have: the `# TYPE` names, and for a histogram or a
 * summary its `_bucket`, `_sum` and `_count` series (a family may have no sample yet).
 */
export function exportedNames(scrape: string): Set<string> {
  const names = new Set<string>();
  for (const [, name, type] of scrape.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    names.add(name!);
    if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) names.add(`${name}${suffix}`);
    if (type === 'summary') for (const suffix of ['_sum', '_count']) names.add(`${name}${suffix}`);
  }
  return names;
}
