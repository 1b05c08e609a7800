// Each test file starts with what a fresh server instance holds in memory. The database tier runs
// its files one after another in the same workers (isolate: false in vitest.config.ts), so a
// module's per-instance state would otherwise carry over from the file before: the wrong operator
// secrets one file sends on purpose would get the next file's right ones refused (429), and a
// RevenueCat budget one file spends would drop the next file's syncs after webhooks.
import { beforeAll } from 'vitest';
import { resetOperatorSecretThrottle } from '../../lib/auth/operator-secret.ts';
import { resetBudgetSpent } from '../../lib/billing/sync.ts';

beforeAll(() => {
  resetOperatorSecretThrottle();
  resetBudgetSpent();
});
