// npm run link-wallet -- [--base-url <url>, default: defaultBaseUrl in operator.ts] [--chain-id 1] [--user <uuid>] [--email <email>]
// Links a throwaway EVM wallet to the dev user (ana@example.com, unless told otherwise) of the running embedded service, showing each step:
// mint a dev session token, ask for a challenge, sign it as a wallet would (personal_sign), link.
// Reads .env.local like the server (the dev key lives beside EMBEDDED_DB_DIR).
import './load-env.ts';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { mintDevToken } from '../lib/auth/dev-key.ts';
import { devIdentity } from '../lib/auth/dev-user.ts';
import { getConfig } from '../lib/config.ts';
import { commandArgs, usageError } from './command-args.ts';
import { defaultBaseUrl, isUnreachable, unreachableMessage } from './operator.ts';

const HELP = {
  about: 'Link a throwaway EVM wallet to the dev user of the running local service, showing each step: a session token, the challenge, the signature, the link.',
  usage: 'Usage: npm run link-wallet [-- --base-url <url>] [--chain-id <id, default 1>] [--user <uuid>] [--email <email>]',
  docs: 'docs/wallets.md',
};

export interface LinkWalletOptions {
  baseUrl: string;
  token: string;
  chainId: number;
  log?: (line: string) => void;
}

/** The whole flow against a running service; throws with the service's problem detail on failure. */
export async function linkThrowawayWallet({ baseUrl, token, chainId, log = console.log }: LinkWalletOptions) {
  const wallet = privateKeyToAccount(generatePrivateKey());
  const post = async (path: string, body: unknown, expected: number[]) => {
    const response = await fetch(new URL(path, baseUrl), {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const answer = await response.json().catch(() => undefined);
    if (!expected.includes(response.status)) {
      throw new Error(`POST ${path} answered ${response.status}: ${JSON.stringify(answer)}`);
    }
    return answer;
  };

  log(`Throwaway wallet: ${wallet.address}`);
  const challenge = await post('/api/wallet-link/challenge', { chain: 'evm', address: wallet.address, chainId }, [201]);
  log(`\n1. POST /api/wallet-link/challenge -> 201; the message to sign (expires ${challenge.expiresAt}):\n\n${challenge.message}\n`);

  const signature = await wallet.signMessage({ message: challenge.message });
  log(`2. Signed with personal_sign (EIP-191): ${signature}\n`);

  const linked = await post('/api/wallet-link', { payload: { chain: 'evm', address: wallet.address, chainId, message: challenge.message, signature } }, [200, 201]);
  log(`3. POST /api/wallet-link -> ${linked.alreadyLinked ? 200 : 201}:\n${JSON.stringify(linked, null, 2)}`);
  return { wallet: wallet.address, challenge, linked };
}

let baseUrl = defaultBaseUrl();

async function main() {
  const values = commandArgs(HELP, {
    'base-url': { type: 'string', default: defaultBaseUrl() },
    'chain-id': { type: 'string', default: '1' },
    user: { type: 'string' },
    email: { type: 'string' },
  });
  const chainId = Number(values['chain-id']);
  if (!Number.isSafeInteger(chainId) || chainId < 1) usageError(HELP, `--chain-id ${values['chain-id']}: an EVM chain id, a positive whole number (1 is Ethereum)`);
  baseUrl = values['base-url'];
  const config = getConfig();
  if (config.auth.mode !== 'dev-key') {
    throw new Error(`This script mints a dev token, which only a service in local mode with the dev key accepts (auth mode here: ${config.auth.mode}).`);
  }
  const { userId, email } = devIdentity({ user: values.user, email: values.email });
  const token = await mintDevToken(config, { userId, email });
  console.log(`Dev user ${userId} (${email}), service ${baseUrl}`);
  await linkThrowawayWallet({ baseUrl, token, chainId });
}

if (import.meta.main) {
  main().catch((error: unknown) => {
    console.error(isUnreachable(error) ? unreachableMessage(baseUrl) : (error as Error).message);
    process.exit(1);
  });
}
