import { afterAll, beforeAll, expect, it } from 'vitest';
import { generateKeyPair, SignJWT } from 'jose';
import * as readFloor from '../../app/api/bench-read-floor/route.bench.ts';
import { describeOn, useTestDatabase, type TestDatabase } from '../support/databases.ts';
import { callRoute } from '../support/http.ts';
import { testUser } from '../support/tokens.ts';

// The bench's read floor (a route only in the bench's build): it must refuse what GET /api/me
// refuses for its token, or the floor would be cheaper than an honest authenticated read. (One
// engine: the route keeps the first database's connection, as a server does.)
describeOn('pglite')('the bench\'s read floor', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await useTestDatabase('pglite');
  });
  afterAll(() => db?.close());

  it('answers the caller\'s row, made at their first read and read by primary key after', async () => {
    const user = await testUser({ email: 'floor@example.test' });
    const first = await callRoute(readFloor, { headers: { authorization: user.authorization } });
    const again = await callRoute(readFloor, { headers: { authorization: user.authorization } });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ user_id: user.userId, email: 'floor@example.test' });
    expect(again.body).toEqual(first.body);
  });

  it('refuses a missing, expired, foreign-key or non-user token with 401', async () => {
    const expired = await testUser({ expiresInSeconds: -120 });
    const service = await testUser({ role: 'service_role' });
    const { privateKey } = await generateKeyPair('ES256');
    const forged = await new SignJWT({ role: 'authenticated' }).setProtectedHeader({ alg: 'ES256' }).setIssuer('account-link-dev').setAudience('authenticated')
      .setSubject(crypto.randomUUID()).setExpirationTime('1h').sign(privateKey);
    for (const authorization of [undefined, expired.authorization, service.authorization, `Bearer ${forged}`, 'Bearer not-a-jwt']) {
      const response = await callRoute(readFloor, { headers: authorization === undefined ? {} : { authorization } });
      expect(response.status).toBe(401);
    }
  });
});
