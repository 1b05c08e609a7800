import { authenticate } from '#lib/auth/session.ts';
import { getConfig } from '#lib/config.ts';
import { readJsonBody } from '#lib/http/body.ts';
import { defineRoute, json } from '#lib/http/route.ts';
import { parseLinkRequest, WALLET_BODY_MAX_BYTES } from '#lib/wallets/schemas.ts';
import { linkWallet, listWalletLinks } from '#lib/wallets/service.ts';
import { moveOutboxAfterResponse } from '#lib/http/outbox-after-response.ts';

export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  // POST /api/wallet-link - link the wallet that signed the caller's challenge (201 new, 200 already linked)
  POST: async (request) => {
    const user = await authenticate(request, { requireLiveSession: true });
    const input = parseLinkRequest(await readJsonBody(request, { maxBytes: WALLET_BODY_MAX_BYTES }), getConfig());
    const result = await linkWallet(user, input);
    moveOutboxAfterResponse(); // the events it caused, and lapses come due (lib/events/delivery.ts)
    return json(result, { status: result.alreadyLinked ? 200 : 201 });
  },
  // GET /api/wallet-link - list the caller's linked wallets
  GET: async (request) => json(await listWalletLinks(await authenticate(request))),
});
