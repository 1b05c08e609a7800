import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { runMigrations } from '../../lib/db/migrate.ts';
import { clientSession } from '../../lib/db/postgres.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';
import { describeOn } from '../support/databases.ts';

/**
 * billing_legacy_horizon (20261126000500_flat_cost_at_scale.sql): a new id's history is looked for
 * only among events recorded before groups existed, up to the last of them. On a database upgraded
 * with such events, the migration records when that was; on one that never had any, nothing is
 * looked for. (tests/billing/fold.test.ts folds such a history; this checks what the migration records.)
 */
describeOn('postgres')('the legacy horizon on an upgraded database (real Postgres server)', () => {
  const MIGRATION = '20261126000500_flat_cost_at_scale.sql';
  let client: pg.Client;
  let before: string;

  beforeAll(async () => {
    const name = `horizon_${randomBytes(4).toString('hex')}`;
    await createDatabase(inject('postgresServerUrl'), name);
    client = new pg.Client({ connectionString: inject('postgresServerUrl').replace(/\/postgres$/, `/${name}`) });
    await client.connect();
    // Every migration before this one.
    before = mkdtempSync(path.join(tmpdir(), 'migrations-before-'));
    for (const file of readdirSync('supabase/migrations').filter((file) => file.endsWith('.sql') && file < MIGRATION)) {
      cpSync(path.join('supabase/migrations', file), path.join(before, file));
    }
    await runMigrations(clientSession(client), { dir: before });
  });
  afterAll(async () => {
    await client?.end();
    rmSync(before, { recursive: true, force: true });
  });

  it('records the last receive time of events without a plan or filed under an id without a group; nothing else counts', async () => {
    const event = (id: string, subject: string | null, receivedAt: string, plan: object | null) => client.query(`
      insert into public.billing_events (event_id, type, app_user_id, event_at, received_at, outcome, body, subject_id, sort_rank, plan)
      values ($1, 'RENEWAL', $2, $3::timestamptz - interval '1 minute', $3, 'applied', jsonb_build_object('event', jsonb_build_object('id', $1::text)), $2, 0, $4)`,
    [id, subject, receivedAt, plan === null ? null : JSON.stringify(plan)]);
    await client.query(`insert into public.billing_subscribers (app_user_id, group_id) values ('grouped', 'grouped')`);
    await event('legacy-without-plan', 'grouped', '2026-11-20T10:00:00Z', null);
    await event('legacy-without-group', 'old-id', '2026-11-21T10:00:00Z', { eventId: 'legacy-without-group' });
    await event('recorded-since', 'grouped', '2026-11-22T10:00:00Z', { eventId: 'recorded-since' });
    await event('erased', null, '2026-11-23T10:00:00Z', null); // a deleted user's: filed under no one

    expect(await runMigrations(clientSession(client))).toContain(MIGRATION);
    const { rows } = await client.query(`select received_before from public.billing_legacy_horizon`);
    expect(rows).toEqual([{ received_before: new Date('2026-11-21T10:00:00Z') }]);
  });
});
