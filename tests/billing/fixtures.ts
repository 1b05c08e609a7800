import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { BillingWebhookBody } from '../../lib/billing/webhook-body.ts';

/**
 * The corpus: realistic RevenueCat request bodies, one per file in ./fixtures, written after
 * RevenueCat's "Event Types and Fields" and "Sample Events" pages (every event type, trials,
 * refunds, anonymous ids with aliases, sandbox, unknown fields, a future type, ~40 KB of
 * subscriber attributes, TRANSFER without app_user_id).
 */
const DIR = path.join(import.meta.dirname, 'fixtures');

export const FIXTURE_NAMES = readdirSync(DIR).filter((name) => name.endsWith('.json')).map((name) => name.slice(0, -5)).sort();

export const DAY_MS = 86_400_000;
/** The corpus timeline: the first purchase is at T0, its first period ends at P1_END. */
export const T0 = Date.parse('2026-03-01T10:00:00Z');
export const P1_END = T0 + 30 * DAY_MS;
export const P2_END = T0 + 60 * DAY_MS;
export const CORPUS_USER = 'f3b0c6a2-5d1e-4c59-9a51-3f1f0a6c2b7e';
export const CORPUS_ANON = '$RCAnonymousID:4be1f0a3c29d4e6f8a7b1c2d3e4f5a6b';
export const CORPUS_ANON2 = '$RCAnonymousID:9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f';

/** A fresh copy of a corpus body. */
export function loadFixture(name: string): BillingWebhookBody {
  return JSON.parse(readFileSync(path.join(DIR, `${name}.json`), 'utf8')) as BillingWebhookBody;
}

/** A corpus body with event fields replaced (undefined removes a field). */
export function fixture(name: string, event: Record<string, unknown> = {}): BillingWebhookBody {
  const body = loadFixture(name);
  for (const [key, value] of Object.entries(event)) {
    if (value === undefined) delete body.event[key];
    else body.event[key] = value;
  }
  return body;
}
