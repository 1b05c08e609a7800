import { authenticate } from '#lib/auth/session.ts';
import { getConfig } from '#lib/config.ts';
import { readJsonBody } from '#lib/http/body.ts';
import { defineRoute, json } from '#lib/http/route.ts';
import { parseChallengeRequest, WALLET_BODY_MAX_BYTES } from '#lib/wallets/schemas.ts';
import { issueChallenge } from '#lib/wallets/service.ts';

// POST /api/wallet-link/challenge - issue the exact message a wallet signs to prove it is the caller's
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  POST: async (request) => {
    // A challenge is the first step of a write: a signed-out session gets none (401 session_revoked).
    const user = await authenticate(request, { requireLiveSession: true });
    const input = parseChallengeRequest(await readJsonBody(request, { maxBytes: WALLET_BODY_MAX_BYTES }), getConfig());
    return json(await issueChallenge(user, input), { status: 201 });
  },
});
