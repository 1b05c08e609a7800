import { authenticateOperator } from '#lib/auth/operator-secret.ts';
import { moveOutboxNow } from '#lib/events/delivery.ts';
import { defineRoute, json, type RouteHandler } from '#lib/http/route.ts';

// GET or POST /api/cron/events - move the outbox: tell access that ended by time (events and live
// updates), then send each endpoint its due events. The daily crons of vercel.json do it too; a
// schedule of every minute (Supabase Cron, or a Vercel Pro cron: docs/events.md) tells a lapse
// within a minute. `done: false` means the next run goes on. Idempotent, and two runs at once share
// the work.
const moveOutbox: RouteHandler = async (request, { annotate }) => {
  authenticateOperator(request, 'cron');
  const report = await moveOutboxNow();
  annotate({ events: report });
  return json(report);
};

export const { GET, POST, PUT, PATCH, DELETE, OPTIONS } = defineRoute({ GET: moveOutbox, POST: moveOutbox });
