import { authenticate } from '#lib/auth/session.ts';
import { defineRoute } from '#lib/http/route.ts';
import { unlinkWallet } from '#lib/wallets/service.ts';
import { moveOutboxAfterResponse } from '#lib/http/outbox-after-response.ts';

// DELETE /api/wallet-link/{linkId} - unlink one of the caller's wallets (204)
export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({
  DELETE: async (request, { params }) => {
    await unlinkWallet(await authenticate(request, { requireLiveSession: true }), params.linkId);
    moveOutboxAfterResponse(); // the events it caused, and lapses come due (lib/events/delivery.ts)
    return new Response(null, { status: 204, headers: { 'cache-control': 'no-store' } });
  },
});
