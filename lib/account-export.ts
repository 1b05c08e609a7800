import { callDb } from './db/index.ts';
import { DomainError } from './errors.ts';
import { isUuid } from './uuid.ts';

/**
 * Everything stored about one user, as JSON (the right of access and of portability): their
 * wallet links, challenges and contract checks; their billing ids, subscriber rows, entitlement
 * rows, sync marks and every billing event and snapshot filed under them with its whole stored
 * body; their league memberships with the league. The rows as stored, in ONE SQL function call
 * (`account_export`). GET /api/me/export answers it to the user themself; GET
 * /api/admin/users/{userId}/export and `npm run user:export` to an operator, for any user id.
 */
export interface AccountExport {
  userId: string;
  exportedAt: string;
  wallets: { links: unknown[]; challenges: unknown[]; contractChecks: unknown[] };
  billing: { ids: string[]; subscribers: unknown[]; entitlements: unknown[]; syncQueue: unknown[]; syncRequests: unknown[]; events: unknown[] };
  leagues: { league: unknown; member: unknown }[];
}

export async function exportAccount(userId: string): Promise<AccountExport> {
  if (!isUuid(userId)) throw new DomainError('invalid_request', 'The user id must be a UUID.');
  return callDb<AccountExport>('account_export', { p_user_id: userId.toLowerCase() });
}

/** How the export is offered for download: a file named after the user and the day. */
export function exportHeaders(account: Pick<AccountExport, 'userId' | 'exportedAt'>): Record<string, string> {
  return { 'content-disposition': `attachment; filename="account-export-${account.userId}-${account.exportedAt.slice(0, 10)}.json"` };
}
