import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ACCOUNT_CHANGE_KINDS as PUBLISHED_KINDS } from '../../lib/account-changes.ts';
import { ACCOUNT_CHANGE_KINDS } from '../../packages/client/src/live.ts';
import { loadConfig } from '../../lib/config.ts';
import { buildOpenApiDocument } from '../../lib/openapi/document.ts';
import { CLIENT_TYPES_FILE, generateClientTypes } from '../../scripts/client-generate.ts';

/**
 * The typed client is kept in step with the OpenAPI document: its types are generated from the
 * document, and this fails when the committed file is not what the document gives today.
 */
describe('packages/client/src/api-types.ts', () => {
  it('is what openapi-typescript makes of the document today (else: npm run client:generate)', async () => {
    const fresh = await generateClientTypes();
    const committed = readFileSync(CLIENT_TYPES_FILE, 'utf8');
    // One message instead of a long diff: the first line that differs.
    const at = fresh.split('\n').findIndex((line, i) => line !== committed.split('\n')[i]);
    expect(at === -1 && fresh.length === committed.length ? 'current' : `stale from line ${at + 1}: run npm run client:generate`).toBe('current');
  });

  it('has an operation for each of the document\'s, and none for OPTIONS', () => {
    const committed = readFileSync(CLIENT_TYPES_FILE, 'utf8');
    const document = buildOpenApiDocument(loadConfig({})) as unknown as { paths: Record<string, Record<string, { operationId?: string }>> };
    const ids = Object.values(document.paths).flatMap((item) => Object.values(item).flatMap((op) => (op.operationId ? [op.operationId] : [])));
    expect(ids.length).toBe(28); // with the operator's status, explanation and export, the user's export, the cron routes by POST (the events cron too), and the operator's five event routes
    for (const id of ids) expect(committed).toContain(`    ${id}: {`);
    expect(committed).not.toMatch(/options: operations/);
    // A deployment's networks are its configuration: the client's types take any.
    expect(committed.match(/^\s+chainId\??: .*;$/gm)?.map((line) => line.trim())).toEqual(expect.arrayContaining(['chainId: number;', 'chainId?: number;']));
    expect(committed).not.toMatch(/chainId\??: \d/);
    expect(committed).not.toMatch(/cluster\??: "/);
    // ...and so are the chains it checks contract wallets on (the default configuration names two, unchecked).
    expect(committed).not.toMatch(/[Cc]hains? \d+(, \d+)* (has|have) no contract-wallet checks/);
    expect(committed).toContain('on a chain whose contract wallets the deployment checks');
  });

  it('knows the kinds of change the service publishes and documents for account_changed', () => {
    const document = buildOpenApiDocument(loadConfig({})) as unknown as { paths: Record<string, { get: { responses: Record<string, { content: Record<string, { 'x-events': { account_changed: { properties: { what: { enum: string[] } } } } }> }> } }> };
    const documented = document.paths['/api/me/events']!.get.responses['200']!.content['text/event-stream']!['x-events'].account_changed.properties.what.enum;
    expect([...ACCOUNT_CHANGE_KINDS]).toEqual(documented);
    expect([...PUBLISHED_KINDS]).toEqual(documented);
  });
});
