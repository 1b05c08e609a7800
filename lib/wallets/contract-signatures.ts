import {
  BaseError,
  createPublicClient,
  hashMessage,
  http,
  isErc6492Signature,
  numberToHex,
  RpcRequestError,
  type Address,
  type Hex,
  type Transport,
} from 'viem';
import { log } from '../log.ts';
import { withinTime } from '../within-time.ts';

/**
 * Signatures of smart-contract wallets, checked on the chain the message names, through that
 * chain's JSON-RPC endpoint with viem's `verifyHash`:
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
 * The caller chooses the contract the validator runs (the factory an ERC-6492 signature names, the
 * account it deploys), so the call is bounded: at most CONTRACT_CHECK_GAS gas (every eth_call goes
 * out with that limit, whatever the node would allow), an answer of at most 1 MB, and
 * WALLET_EVM_RPC_TIMEOUT_MS for the whole verification.
 *
 * Failure is never taken for an answer. viem's `verifyHash` reports a call that could not be made
 * (timeout, HTTP error, a provider's internal error) as `false`, exactly like a contract saying
 * "invalid"; the transport below watches every request of one verification, so only a real answer
 * (a result, or the call's execution failing: a revert, running out of gas) can be "invalid", and
 * anything else is `unanswered`. An unanswered check says whose fault it can be: `providerFault`
 * only for what no request can cause (the provider answered an HTTP 5xx, or could not be reached
 * at all); a timeout, an answer over the size cap or a JSON-RPC error may be the caller's doing.
 */

/** How the wallet proved itself: its own key (checked locally), or its contract on chain. */
export type ContractProofKind = 'erc1271' | 'erc6492';

export interface ChainRpc {
  chainId: number;
  url: string;
  /** The most the whole verification may take, every request included. */
  timeoutMs: number;
}

export type ContractCheck =
  | { outcome: 'valid'; kind: ContractProofKind }
  | { outcome: 'invalid' }
  /** No verdict. `providerFault`: the provider failed (5xx, unreachable), which no request can cause. */
  | { outcome: 'unanswered'; providerFault: boolean };

/** The largest RPC answer read: an eth_call result here is a few hundred bytes. */
const MAX_RPC_RESPONSE_BYTES = 1024 * 1024;

/**
 * The gas one verification call may spend. A real account's check costs far less: deploying it
 * through its factory (a Safe or a Coinbase Smart Wallet: about 300k) and a signature check (a
 * passkey's P-256 verified in Solidity: about 400k). Without a limit the node's own applies (geth:
 * 50M; providers allow more), which a "factory" built to burn gas turns into seconds of work, and
 * the memory this much gas can buy bounds the data a revert can carry.
 */
export const CONTRACT_CHECK_GAS = 2_000_000n;

export async function verifyContractSignature(rpc: ChainRpc, request: { address: string; message: string; signature: Uint8Array }): Promise<ContractCheck> {
  const signature = toHex(request.signature);
  const failures: unknown[] = [];
  const client = createPublicClient({ transport: watchedHttp(rpc, failures) });
  const address = request.address as Address;
  const counterfactual = isErc6492Signature(signature);

  const check = async (): Promise<ContractCheck> => {
    const valid = await client.verifyHash({ address, hash: hashMessage(request.message), signature });
    if (failures.length > 0) return unanswered(rpc, failures[0]);
    if (!valid) return { outcome: 'invalid' };
    if (!counterfactual) return { outcome: 'valid', kind: 'erc1271' };
    // An ERC-6492 signature also verifies once its account exists; the kind says which it was.
    let code: Hex | undefined;
    try {
      code = await client.getCode({ address });
    } catch (error) {
      return unanswered(rpc, error);
    }
    return { outcome: 'valid', kind: code && code !== '0x' ? 'erc1271' : 'erc6492' };
  };
  return withDeadline(check(), rpc);
}

/**
 * The chain's RPC over HTTP, no retries (the deadline is the request's), every eth_call with the
 * gas limit, every failure recorded.
 */
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
        return await transport.request(withGasLimit(args), options);
      } catch (error) {
        if (!isExecutionFailure(error)) failures.push(error);
        throw error;
      }
    };
    return { ...transport, request };
  };
}

/** An eth_call's transaction object gets `gas: CONTRACT_CHECK_GAS` (viem's verifyHash sets none). */
function withGasLimit<T extends { method: string; params?: unknown }>(args: T): T {
  if (args.method !== 'eth_call' || !Array.isArray(args.params) || typeof args.params[0] !== 'object' || args.params[0] === null) return args;
  const [transaction, ...rest] = args.params as [Record<string, unknown>, ...unknown[]];
  return { ...args, params: [{ ...transaction, gas: numberToHex(CONTRACT_CHECK_GAS) }, ...rest] };
}

/**
 * The node ran the call and it failed: that is the contract's answer about the signature (a
 * validator that could not deploy the account, a wallet that reverts on bad signatures, a check
 * that needs more gas than CONTRACT_CHECK_GAS), not a failure to get one. JSON-RPC code 3 is an
 * execution error; geth says -32000 "execution reverted" or "out of gas", anvil -32603 "EVM error OutOfGas".
 */
function isExecutionFailure(error: unknown): boolean {
  const rpcError = error instanceof BaseError ? error.walk((cause) => cause instanceof RpcRequestError) : undefined;
  if (!(rpcError instanceof RpcRequestError)) return false;
  if (rpcError.code === 3) return true;
  // revm (anvil, reth) names each way to run out of gas: OutOfGas, MemoryOOG, PrecompileOOG, ...
  return (rpcError.code === -32000 || rpcError.code === -32603) && (/revert|out ?of ?gas/i.test(rpcError.details) || /OOG\b/.test(rpcError.details));
}

/** Network errors that mean no request reached the provider: it is down or not where configured. */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * Could the caller have caused this failure? Not when the provider answered an HTTP 5xx (its own
 * trouble) or could not be reached at all; anything else (a timeout, an answer too big, a JSON-RPC
 * error, a 4xx) may come from the call the caller chose, so it counts as a check.
 */
export function isProviderFault(error: unknown): boolean {
  const status = findInCauses(error, (cause) => typeof (cause as { status?: unknown }).status === 'number') as { status: number } | undefined;
  if (status) return status.status >= 500;
  const network = findInCauses(error, (cause) => typeof (cause as { code?: unknown }).code === 'string') as { code: string } | undefined;
  return network !== undefined && UNREACHABLE.has(network.code);
}

function findInCauses(error: unknown, matches: (cause: object) => boolean): object | undefined {
  for (let cause = error, depth = 0; typeof cause === 'object' && cause !== null && depth < 10; cause = (cause as { cause?: unknown }).cause, depth++) {
    if (matches(cause)) return cause;
  }
  return undefined;
}

function withDeadline(check: Promise<ContractCheck>, rpc: ChainRpc): Promise<ContractCheck> {
  return withinTime(check, rpc.timeoutMs, () => unanswered(rpc, new Error(`no answer within ${rpc.timeoutMs} ms`)));
}

function unanswered(rpc: ChainRpc, cause: unknown): ContractCheck {
  const providerFault = isProviderFault(cause);
  // The URL holds the provider's key: only its host is logged, and the error's own message
  // (viem puts the URL in it) never is.
  log.warn({ chainId: rpc.chainId, rpcHost: new URL(rpc.url).host, error: describeFailure(cause), providerFault }, 'chain RPC gave no answer');
  return { outcome: 'unanswered', providerFault };
}

function describeFailure(cause: unknown): string {
  if (cause instanceof RpcRequestError) return `JSON-RPC error ${cause.code}`;
  if (cause instanceof BaseError) {
    const status = (cause.walk((inner) => typeof (inner as { status?: unknown }).status === 'number') as { status?: number } | null)?.status;
    const network = (findInCauses(cause, (inner) => typeof (inner as { code?: unknown }).code === 'string') as { code?: string } | undefined)?.code;
    return status ? `${cause.name} (HTTP ${status})` : network ? `${cause.name} (${network})` : cause.name;
  }
  return cause instanceof Error && /^no answer within/.test(cause.message) ? cause.message : 'request failed';
}

function toHex(bytes: Uint8Array): Hex {
  return `0x${Buffer.from(bytes).toString('hex')}`;
}
