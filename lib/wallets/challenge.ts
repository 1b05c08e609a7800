import { randomBytes as nodeRandomBytes, randomUUID } from 'node:crypto';
import { createSignInMessage } from './sign-in-message.ts';
import type { ChallengeInput } from './schemas.ts';

/** How long a wallet has to sign: long enough to find the wallet app, short enough to be useless later. */
export const CHALLENGE_TTL_MS = 10 * 60_000;
/** 128 random bits, written as 32 hex digits (letters and digits, as EIP-4361 wants). */
export const NONCE_BYTES = 16;

export interface Challenge {
  challengeId: string;
  chain: ChallengeInput['chain'];
  address: string;
  addressKey: string;
  chainId?: number;
  cluster?: string;
  nonce: string;
  message: string;
  issuedAt: string;
  expiresAt: string;
}

export interface ChallengeContext {
  user: { userId: string; email: string | null };
  /** APP_ORIGIN from the configuration: the message names this site, never the request's Host header. */
  appOrigin: string;
  now: Date;
  random?: { uuid(): string; bytes(length: number): Uint8Array };
}

const defaultRandom = { uuid: () => randomUUID(), bytes: (length: number) => new Uint8Array(nodeRandomBytes(length)) };

/**
 * The exact message the wallet will sign, and what to store about it. Pure given the context: the
 * clock and the randomness are injected. The challenge id is the message's Request ID, so the
 * signed text itself says which stored challenge it answers.
 */
export function buildChallenge(input: ChallengeInput, context: ChallengeContext): Challenge {
  const random = context.random ?? defaultRandom;
  const origin = new URL(context.appOrigin);
  const challengeId = random.uuid();
  const nonce = Buffer.from(random.bytes(NONCE_BYTES)).toString('hex');
  const issuedAt = context.now.toISOString();
  const expiresAt = new Date(context.now.getTime() + CHALLENGE_TTL_MS).toISOString();
  const fields = {
    domain: origin.host,
    address: input.address,
    statement: linkStatement(context.user, origin.host),
    uri: origin.origin,
    version: '1' as const,
    nonce,
    issuedAt,
    expirationTime: expiresAt,
    requestId: challengeId,
  };
  const message = createSignInMessage(input.chain === 'evm' ? { ...fields, family: 'evm', chainId: input.chainId } : { ...fields, family: 'solana', chainId: input.cluster });
  return {
    challengeId,
    chain: input.chain,
    address: input.address,
    addressKey: input.addressKey,
    ...(input.chain === 'evm' ? { chainId: input.chainId } : { cluster: input.cluster }),
    nonce,
    message,
    issuedAt,
    expiresAt,
  };
}

/** What the wallet shows the user: which account of which site the wallet is about to be tied to. */
export function linkStatement(user: { userId: string; email: string | null }, host: string): string {
  const account = user.email ? `the account ${maskEmail(user.email)}` : `the account with user id ${user.userId}`;
  return `Link this wallet to ${account} on ${host}. Signing proves you own the wallet; it sends no transaction and costs nothing.`;
}

/**
 * `jane.doe@example.com` -> `j***@e***.com`: enough for the owner to recognise the account, little
 * for anyone reading over a shoulder. Only characters an EIP-4361 statement may hold survive.
 */
export function maskEmail(email: string): string {
  const at = email.lastIndexOf('@');
  const local = at > 0 ? email.slice(0, at) : email;
  const domain = at > 0 ? email.slice(at + 1) : '';
  const first = (text: string) => (/^[A-Za-z0-9]/.test(text) ? text[0] : '*');
  const labels = domain.split('.');
  const tld = labels.length > 1 ? labels.at(-1)! : '';
  const maskedDomain = `${first(domain)}***${tld && /^[A-Za-z0-9-]+$/.test(tld) ? `.${tld}` : ''}`;
  return `${first(local)}***@${maskedDomain}`;
}
