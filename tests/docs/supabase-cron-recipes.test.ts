import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import * as billingSyncRoute from '../../app/api/cron/billing-sync/route.ts';
import * as eventsRoute from '../../app/api/cron/events/route.ts';
import * as maintenanceRoute from '../../app/api/cron/maintenance/route.ts';
import { resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import { createDatabase } from '../../scripts/support/postgres-server.ts';
import { describeOn, suiteDatabase } from '../support/databases.ts';
import { DEPLOYMENT_SETTINGS, setEnv } from '../support/env.ts';
import { startRouteServer, type RouteServer } from '../support/route-server.ts';
import { inject } from 'vitest';

/**
 * The Supabase Cron recipes of docs/events.md (every minute: the outbox) and docs/operations.md (the
 * daily jobs), run as written against a database with Supabase's Vault, pg_cron and pg_net as their
 * docs describe their SQL (none of the three runs here): `vault.create_secret(secret, name)` and the
 * `vault.decrypted_secrets` view (https://supabase.com/docs/guides/database/vault);
 * `cron.schedule(name, schedule, command)` (https://supabase.com/docs/guides/cron);
 * `net.http_post(url, body '{}', params '{}', headers '{"Content-Type": "application/json"}',
 * timeout_milliseconds)`, which queues the request and adds that Content-Type when the headers lack
 * one, and `net._http_response`, where its worker keeps each answer
 * (https://supabase.com/docs/guides/database/extensions/pg_net). Each scheduled command is run as
 * pg_cron would; each request it queued is sent over real HTTP to the service's cron routes, as
 * pg_net's worker would; and the docs' own check reads the answers.
 */
const CRON_SECRET = 'cron-secret-for-the-supabase-cron-recipes-0123';

// Vault, pg_cron and pg_net as far as the recipes use them (the real ones are C extensions).
const SUPABASE_EXTENSIONS_SQL = `
  create schema vault;
  create table vault.secrets (id uuid primary key default gen_random_uuid(), name text unique, description text not null default '', secret text not null);
  create function vault.create_secret(new_secret text, new_name text default null, new_description text default '', new_key_id uuid default null)
  returns uuid language sql as $$ insert into vault.secrets (name, description, secret) values (new_name, new_description, new_secret) returning id $$;
  create view vault.decrypted_secrets as select id, name, description, secret, secret as decrypted_secret from vault.secrets;

  create schema cron;
  create table cron.job (jobid bigserial primary key, jobname text unique, schedule text not null, command text not null);
  create function cron.schedule(job_name text, schedule text, command text) returns bigint language sql as $$
    insert into cron.job (jobname, schedule, command) values (job_name, schedule, command)
    on conflict (jobname) do update set schedule = excluded.schedule, command = excluded.command returning jobid $$;
  create function cron.unschedule(job_name text) returns boolean language sql as $$
    with gone as (delete from cron.job where jobname = job_name returning 1) select exists (select 1 from gone) $$;

  create schema net;
  create table net.http_request_queue (id bigserial primary key, method text not null, url text not null, headers jsonb not null, body bytea, timeout_milliseconds int not null);
  create table net._http_response (id bigint, status_code integer, content_type text, headers jsonb, content text, timed_out bool, error_msg text, created timestamptz not null default now());
  create function net.http_post(url text, body jsonb default '{}'::jsonb, params jsonb default '{}'::jsonb,
                                headers jsonb default '{"Content-Type": "application/json"}'::jsonb, timeout_milliseconds int default 5000)
  returns bigint language plpgsql as $$
  declare
    v_id bigint;
  begin
    if not exists (select 1 from jsonb_object_keys(coalesce(headers, '{}'::jsonb)) k where lower(k) = 'content-type') then
      headers := coalesce(headers, '{}'::jsonb) || '{"Content-Type": "application/json"}'::jsonb;
    end if;
    if body is null then
      raise exception 'body must not be null';
    end if;
    insert into net.http_request_queue (method, url, headers, body, timeout_milliseconds)
      values ('POST', url, headers, convert_to(body::text, 'UTF8'), timeout_milliseconds) returning id into v_id;
    return v_id;
  end $$;
`;

/** The fenced SQL blocks of a doc's section (from its heading to the next heading of its level or above). */
function sqlBlocksOfSection(file: string, heading: string): string[] {
  const text = readFileSync(file, 'utf8');
  const start = text.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`${file} has no section "${heading}"`);
  const level = heading.match(/^#+/)![0].length;
  const rest = text.slice(start + heading.length + 2);
  const next = rest.search(new RegExp(`\\n#{1,${level}} `));
  const section = next < 0 ? rest : rest.slice(0, next);
  return [...section.matchAll(/```sql\n([\s\S]*?)```/g)].map((match) => match[1]!.replace(/^ {3}/gm, ''));
}

describeOn('postgres')('the Supabase Cron recipes, run as the docs write them', () => {
  suiteDatabase('postgres');
  let restore: () => void;
  let service: RouteServer;
  let supabase: pg.Client;

  beforeAll(async () => {
    restore = setEnv({ ...DEPLOYMENT_SETTINGS, CRON_SECRET, REVENUECAT_SECRET_API_KEY: undefined, REVENUECAT_API_URL: undefined, REVENUECAT_STAND_IN: undefined, EVENTS_WEBHOOK_URL: undefined });
    service = await startRouteServer([
      [/^\/api\/cron\/events$/, eventsRoute], [/^\/api\/cron\/maintenance$/, maintenanceRoute], [/^\/api\/cron\/billing-sync$/, billingSyncRoute],
    ]);
    // The project's database, where the recipes run (the SQL editor's role may create schemas).
    const serverUrl = inject('postgresServerUrl');
    const name = `supabase_cron_${randomBytes(4).toString('hex')}`;
    await createDatabase(serverUrl, name);
    supabase = new pg.Client({ connectionString: serverUrl.replace(/\/postgres$/, `/${name}`) });
    await supabase.connect();
    await supabase.query(SUPABASE_EXTENSIONS_SQL);
  });
  afterAll(async () => {
    await supabase?.end();
    await service?.close();
    restore();
    resetOperatorSecretThrottle();
  });

  /** Each block with the placeholders filled in, the extensions' `create extension` left out (stood in above). */
  const asWritten = (block: string, secret: string) => block
    .replaceAll('https://<your-app>', service.url)
    .replaceAll('<CRON_SECRET>', secret)
    .split('\n').filter((line) => !/^create extension /i.test(line)).join('\n');

  /** Every scheduled job run once, as pg_cron would, and every request it queued sent, as pg_net's worker would. */
  async function runJobsAndSendRequests(): Promise<void> {
    await supabase.query('delete from net.http_request_queue; delete from net._http_response');
    for (const { command } of (await supabase.query<{ command: string }>('select command from cron.job order by jobid')).rows) await supabase.query(command);
    const queued = await supabase.query<{ id: string; url: string; headers: Record<string, string>; body: Buffer; timeout_milliseconds: number }>(
      'select id, url, headers, body, timeout_milliseconds from net.http_request_queue order by id');
    for (const request of queued.rows) {
      const response = await fetch(request.url, { method: 'POST', headers: request.headers, body: request.body.toString('utf8'), signal: AbortSignal.timeout(request.timeout_milliseconds) });
      await supabase.query('insert into net._http_response (id, status_code, content_type, headers, content, timed_out) values ($1, $2, $3, $4, $5, false)',
        [request.id, response.status, response.headers.get('content-type'), JSON.stringify(Object.fromEntries(response.headers)), await response.text()]);
    }
  }

  it('schedules the outbox every minute and the daily jobs at vercel.json\'s times; each call is a run done', async () => {
    const eventsBlocks = sqlBlocksOfSection('docs/events.md', '### (b) Supabase Cron, on any plan of Vercel (opt-in)');
    const dailyBlocks = sqlBlocksOfSection('docs/operations.md', '### Scheduling the cron jobs elsewhere (Supabase Cron)');
    expect(eventsBlocks.join('\n')).toMatch(/create extension if not exists pg_cron/);
    // The daily recipe creates the same two secrets the events recipe does (it says to skip them then).
    for (const block of [...eventsBlocks.slice(0, -1), ...dailyBlocks.map((block) => block.replace(/^select vault\.create_secret.*\n/gm, ''))]) {
      await supabase.query(asWritten(block, CRON_SECRET));
    }
    const jobs = (await supabase.query<{ jobname: string; schedule: string }>('select jobname, schedule from cron.job order by jobname')).rows;
    const vercel = JSON.parse(readFileSync('vercel.json', 'utf8')) as { crons: { path: string; schedule: string }[]; functions: Record<string, { maxDuration: number }> };
    expect(jobs).toEqual([
      { jobname: 'account-link-billing-sync', schedule: vercel.crons.find((cron) => cron.path === '/api/cron/billing-sync')!.schedule },
      { jobname: 'account-link-events', schedule: '* * * * *' },
      { jobname: 'account-link-maintenance', schedule: vercel.crons.find((cron) => cron.path === '/api/cron/maintenance')!.schedule },
    ]);

    await runJobsAndSendRequests();
    const requests = (await supabase.query<{ url: string; headers: Record<string, string>; timeout_milliseconds: number }>('select url, headers, timeout_milliseconds from net.http_request_queue order by url')).rows;
    expect(requests.map((request) => new URL(request.url).pathname)).toEqual(['/api/cron/billing-sync', '/api/cron/events', '/api/cron/maintenance']);
    for (const request of requests) {
      // The function's whole time (pg_net gives up after 5 s unless told).
      expect(request.timeout_milliseconds).toBeGreaterThanOrEqual(Object.values(vercel.functions)[0]!.maxDuration * 1000);
      expect(request.headers).toMatchObject({ 'Content-Type': 'application/json', Authorization: `Bearer ${CRON_SECRET}` });
    }

    // The docs' check: the answers pg_net kept.
    const check = asWritten(eventsBlocks.at(-1)!, CRON_SECRET);
    expect(check).toMatch(/from net\._http_response/);
    const answers = (await supabase.query<{ status_code: number; content: string }>(check)).rows;
    expect(answers).toHaveLength(3);
    for (const answer of answers) {
      expect(answer.status_code, answer.content).toBe(200);
      const body = JSON.parse(answer.content) as { done?: boolean; nothingToDo?: string };
      // The outbox's run and maintenance say done; the daily sweep on webhooks only says it has nothing to do.
      expect(body.done === true || typeof body.nothingToDo === 'string', answer.content).toBe(true);
    }
  });

  it('a secret in Vault that differs from CRON_SECRET: 401 in net._http_response, as the docs say', async () => {
    await supabase.query(`update vault.secrets set secret = 'not-the-cron-secret-0123456789abcdef' where name = 'account_link_cron_secret'`);
    resetOperatorSecretThrottle();
    await runJobsAndSendRequests();
    const answers = (await supabase.query<{ status_code: number; content: string }>('select status_code, content from net._http_response')).rows;
    expect(answers.map((answer) => answer.status_code)).toEqual([401, 401, 401]);
    expect(answers.map((answer) => (JSON.parse(answer.content) as { code: string }).code)).toEqual(['invalid_cron_secret', 'invalid_cron_secret', 'invalid_cron_secret']);
    // And `cron.unschedule` as the docs give it stops the outbox's.
    expect((await supabase.query(`select cron.unschedule('account-link-events')`)).rows[0]).toEqual({ unschedule: true });
  });
});
