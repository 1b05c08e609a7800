import { describe, expect, it } from 'vitest';
import { callDb, DbError } from '../../lib/db/index.ts';
import { DATABASE_KINDS, suiteDatabase } from '../support/databases.ts';

/**
 * A call that loses a deadlock (SQLSTATE 40P01) or a serialization conflict (40001) was rolled back
 * whole: the port runs it again, twice at most. The functions below raise those states as Postgres
 * does; a sequence (not rolled back with the transaction) counts the attempts.
 */
describe.each(DATABASE_KINDS)('the database port retries conflicts on %s', (kind) => {
  const db = suiteDatabase(kind);
  const define = async (name: string, failures: number, state: string) => {
    await db.sql(`create sequence public.${name}_attempts`);
    await db.sql(`create function public.${name}() returns jsonb language plpgsql as $$
      begin
        if nextval('public.${name}_attempts') <= ${failures} then raise exception 'conflict' using errcode = '${state}'; end if;
        return '"done"'::jsonb;
      end $$`);
  };
  const attempts = async (name: string) => Number((await db.sql<{ n: string }>(`select last_value as n from public.${name}_attempts`))[0]!.n);

  it('runs a call that lost a deadlock again, and one that lost a serialization conflict', async () => {
    await define('test_deadlock_once', 1, '40P01');
    await define('test_serialization_twice', 2, '40001');
    expect(await callDb('test_deadlock_once')).toBe('done');
    expect(await attempts('test_deadlock_once')).toBe(2);
    expect(await callDb('test_serialization_twice')).toBe('done');
    expect(await attempts('test_serialization_twice')).toBe(3);
  });

  it('gives up after two retries, and never retries anything else', async () => {
    await define('test_deadlock_always', 99, '40P01');
    await define('test_unique_violation', 1, '23505');
    const always = await callDb('test_deadlock_always').catch((error: unknown) => error);
    expect(always).toBeInstanceOf(DbError);
    expect((always as DbError).kind).toBe('unavailable');
    expect(await attempts('test_deadlock_always')).toBe(3);
    const conflict = await callDb('test_unique_violation').catch((error: unknown) => error);
    expect((conflict as DbError).kind).toBe('conflict');
    expect(await attempts('test_unique_violation')).toBe(1);
  });
});
