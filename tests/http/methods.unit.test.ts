import { describe, expect, it } from 'vitest';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { callRoute } from '../support/http.ts';

/** Every route file under app/api, found on disk, so a new route is covered without editing this test. */
function routeFiles(dir = 'app/api'): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    // The catch-all (app/api/[[...path]]) answers unknown paths; it is not an endpoint.
    if (entry.isDirectory()) return entry.name.startsWith('[[...') ? [] : routeFiles(full);
    return entry.name === 'route.ts' ? [full] : [];
  });
}

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];
const routes = routeFiles();

describe('unsupported methods answer 405 with Allow, on every route', () => {
  it('finds the routes', () => {
    expect(routes).toContain(path.join('app', 'api', 'health', 'route.ts'));
  });

  it.each(routes)('%s', async (file) => {
    const routeModule = await import(`../../${file}`);
    const params = Object.fromEntries([...file.matchAll(/\[(\w+)\]/g)].map(([, name]) => [name!, '00000000-0000-4000-8000-000000000000']));
    const options = await callRoute(routeModule, { method: 'OPTIONS', params });
    expect(options.status).toBe(204);
    const allow = options.headers.get('allow')!.split(', ');
    const unsupported = METHODS.filter((method) => !allow.includes(method));
    expect(allow).toContain('OPTIONS');
    for (const method of unsupported) {
      const response = await callRoute(routeModule, { method, params });
      expect({ method, status: response.status }).toEqual({ method, status: 405 });
      expect(response.headers.get('allow')).toBe(allow.join(', '));
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect(response.body).toMatchObject({ code: 'method_not_allowed' });
    }
  });
});

describe('an /api path that no route matches', () => {
  it.each(METHODS)('%s answers a problem+json 404', async (method) => {
    const catchAll = await import('../../app/api/[[...path]]/route.ts');
    const response = await callRoute(catchAll, { method, params: { path: 'nope' }, url: '/api/nope' });
    expect(response.status).toBe(404);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(response.body).toMatchObject({ code: 'not_found' });
    expect(response.headers.get('x-request-id')).toBeTruthy();
  });
});
