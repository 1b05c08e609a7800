import {
  BaseError,
  createPublicClient,
  hashMessage,
  http,
  isErc6492Signature,
  RpcRequestError,
  type Address,
  type Hex,
  type Transport,
} from 'viem';
import { DomainError } from '../errors.ts';
import { log } from '../log.ts';

/**
 * Signatures of smart-contract wallets, checked on the chain the message names, through that
 * chain's JSON-RPC endpoint (WALLET_EVM_RPC_URLS) with viem's `verifyHash`:
 *
 *   - ERC-6492 (a signature ending in the 0x6492… magic suffix, made by an account that may not
 *     be deployed yet): one `eth_call` of viem's universal validator, which simulates the
 *     factory call that would deploy the account and then asks it `isValidSignature`. Nothing
 *     is deployed: it is a call, not a transaction.
 *   - ERC-1271 (any other signature the wallet's key did not make): the same call asks the
 *     deployed contract `isValidSignature(hash, signature)`, valid when it answers 0x1626ba7e.
 *
 * The hash is the EIP-191 `personal_sign` hash of the message, the one ordinary wallets sign.
 *
 * Failure is never taken for an answer. viem's `verifyHash` reports a call that could not be made
 * (timeout, HTTP error, a provider's internal error) as `false`, exactly like a contract saying
 * "invalid"; the transport below watches every request of one verification, so an RPC that did
 * not answer becomes 503 `chain_unavailable` (retry later, the challenge is still open), and only
 * a real answer (a result, or the call's execution reverting) can be "invalid".
 */

/** How the wallet proved itself: its own key (checked locally), or its contract on chain. */
export type ContractProofKind = 'erc1271' | 'erc6492';

export interface ChainRpc {
  chainId: number;
  url: string;
  /** The most the whole verification may take, every request included. */
  timeoutMs: number;
}

export type ContractCheck = { valid: true; kind: ContractProofKind } | { valid: false };

/** The largest RPC answer read: an eth_call result here is a few hundred bytes. */
const MAX_RPC_RESPONSE_BYTES = 1024 * 1024;

export async function verifyContractSignature(rpc: ChainRpc, request: { address: string; message: string; signature: Uint8Array }): Promise<ContractCheck> {
  const signature = toHex(request.signature);
  const failures: unknown[] = [];
  const client = createPublicClient({ transport: watchedHttp(rpc, failures) });
  const address = request.address as Address;
  const counterfactual = isErc6492Signature(signature);

  const check = async (): Promise<ContractCheck> => {
    const valid = await client.verifyHash({ address, hash: hashMessage(request.message), signature });
    if (failures.length > 0) throw unavailable(rpc, failures[0]);
    if (!valid) return { valid: false };
    if (!counterfactual) return { valid: true, kind: 'erc1271' };
    // An ERC-6492 signature also verifies once its account exists; the kind says which it was.
    const code = await client.getCode({ address }).catch((error: unknown) => {
      throw unavailable(rpc, error);
    });
    return { valid: true, kind: code && code !== '0x' ? 'erc1271' : 'erc6492' };
  };
  return withDeadline(check(), rpc);
}

/** The chain's RPC over HTTP, no retries (the deadline is the request's), every failure recorded. */
function watchedHttp(rpc: ChainRpc, failures: unknown[]): Transport {
  // fetch refuses URLs with credentials in them; they travel as Basic auth instead.
  const url = new URL(rpc.url);
  const headers: Record<string, string> = {};
  if (url.username || url.password) {
    headers.authorization = `Basic ${Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString('base64')}`;
    url.username = '';
    url.password = '';
  }
  const inner = http(url.toString(), {
    timeout: rpc.timeoutMs,
    retryCount: 0,
    maxResponseBodySize: MAX_RPC_RESPONSE_BYTES,
    fetchOptions: { headers, redirect: 'error' },
  });
  return (parameters) => {
    const transport = inner({ ...parameters, retryCount: 0 });
    const request: typeof transport.request = async (args, options) => {
      try {
        return await transport.request(args, options);
      } catch (error) {
        if (!isExecutionRevert(error)) failures.push(error);
        throw error;
      }
    };
    return { ...transport, request };
  };
}

/**
 * The node ran the call and it reverted: that is the contract's answer about the signature (a
 * validator that could not deploy the account, a wallet that reverts on bad signatures), not a
 * failure to get one. JSON-RPC code 3 is an execution error; some nodes say -32000 "execution reverted".
 */
function isExecutionRevert(error: unknown): boolean {
  const rpcError = error instanceof BaseError ? error.walk((cause) => cause instanceof RpcRequestError) : undefined;
  if (!(rpcError instanceof RpcRequestError)) return false;
  return rpcError.code === 3 || (rpcError.code === -32000 && /revert/i.test(rpcError.details));
}

function withDeadline(check: Promise<ContractCheck>, rpc: ChainRpc): Promise<ContractCheck> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(unavailable(rpc, new Error(`no answer within ${rpc.timeoutMs} ms`))), rpc.timeoutMs);
  });
  return Promise.race([check, deadline]).finally(() => clearTimeout(timer));
}

function unavailable(rpc: ChainRpc, cause: unknown): DomainError {
  if (cause instanceof DomainError) return cause;
  // The URL holds the provider's key: only its host is logged, and the error's own message
  // (viem puts the URL in it) never is.
  log.warn({ chainId: rpc.chainId, rpcHost: new URL(rpc.url).host, error: describeFailure(cause) }, 'chain RPC unavailable');
  return new DomainError(
    'chain_unavailable',
    `The RPC of chain ${rpc.chainId} did not answer, so this smart-contract wallet's signature could not be checked. Nothing was changed and the challenge is still open: retry with the same signature.`,
  );
}

function describeFailure(cause: unknown): string {
  if (cause instanceof RpcRequestError) return `JSON-RPC error ${cause.code}`;
  if (cause instanceof BaseError) {
    const status = (cause.walk((inner) => typeof (inner as { status?: unknown }).status === 'number') as { status?: number } | null)?.status;
    return status ? `${cause.name} (HTTP ${status})` : cause.name;
  }
  return cause instanceof Error && /^no answer within/.test(cause.message) ? cause.message : 'request failed';
}

function toHex(bytes: Uint8Array): Hex {
  return `0x${Buffer.from(bytes).toString('hex')}`;
}
