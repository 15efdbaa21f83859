import { describe, expect, it } from 'vitest';
import { isJsonMediaType } from '../../src/http/media-type.js';

/** The one rule that says whether a request body is declared as JSON (src/http/media-type.ts). */
describe('isJsonMediaType', () => {
  it.each([
    'application/json',
    'APPLICATION/JSON',
    'application/json; charset=utf-8',
    'application/json;charset=UTF-8',
    'application/json;',
    'application/json ;',
    'application/json; charset',
    'application/json;;',
    ' application/json ',
    '\tapplication/json\t; x=y',
    'application/vnd.x+json',
    'application/problem+json; charset=utf-8',
    "application/a!#$%&'*.^_`|~-b+json",
  ])('JSON: %j', (type) => {
    expect(isJsonMediaType(type)).toBe(true);
  });

  it.each([
    undefined,
    '',
    ';',
    'text/plain',
    'text/json',
    'application/jsonx',
    'application/json-seq',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/+json',
    'application/ json',
    'application /json',
    'application/js on',
    'application/json/x',
    'application/vnd.x+json+',
    'json',
    '*/*',
  ])('not JSON: %j', (type) => {
    expect(isJsonMediaType(type)).toBe(false);
  });
});
