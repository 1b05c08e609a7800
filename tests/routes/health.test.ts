import { afterAll, describe, expect, it } from 'vitest';
import * as healthRoute from '../../app/api/health/route.ts';
import * as liveRoute from '../../app/api/health/live/route.ts';
import { closeDatabase } from '../../lib/db/index.ts';
import { DATABASE_KINDS, engineOn, useTestDatabase } from '../support/databases.ts';
import { setEnv } from '../support/env.ts';
import { callRoute } from '../support/http.ts';
import { freePort } from '../../scripts/support/postgres-server.ts';

describe('GET /api/health', () => {
  afterAll(() => closeDatabase());

  it.each(DATABASE_KINDS)('answers 200 ok when the %s database answers', async (kind) => {
    const db = await useTestDatabase(kind);
    try {
      const response = await callRoute(healthRoute);
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ status: 'ok', database: 'ok', mode: 'embedded' });
    } finally {
      await closeDatabase();
      await db.close();
    }
  });

  it.runIf(engineOn('pglite'))('reports its database calls in Server-Timing', async () => {
    const db = await useTestDatabase('pglite');
    try {
      const response = await callRoute(healthRoute);
      expect(response.headers.get('server-timing')).toMatch(/^db;desc="1 calls";dur=[\d.]+, total;dur=[\d.]+$/);
    } finally {
      await closeDatabase();
      await db.close();
    }
  });

  it('GET /api/health/live answers without touching the database', async () => {
    const response = await callRoute(liveRoute);
    expect(response.status).toBe(200);
    expect(response.body).toEqual({ status: 'ok' });
    expect(response.headers.get('server-timing')).toMatch(/^db;desc="0 calls"/);
  });

  it('answers 503 with Retry-After when the database does not answer, and says the mode', async () => {
    const restore = setEnv({ DATABASE_URL: `postgres://nobody:secret@127.0.0.1:${await freePort()}/none`, LOCAL_DEV: '1' });
    try {
      await closeDatabase();
      const response = await callRoute(healthRoute);
      expect(response.status).toBe(503);
      expect(response.headers.get('retry-after')).toBeTruthy();
      expect(response.body).toEqual({ status: 'degraded', database: 'unavailable', mode: 'postgres' });
      expect(response.text).not.toContain('secret');
    } finally {
      restore();
      await closeDatabase();
    }
  });
});
