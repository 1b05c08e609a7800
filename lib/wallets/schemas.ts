import { z } from 'zod';
import type { Config } from '../config.ts';
import { DomainError, parseWithSchema, type DomainErrorCode } from '../errors.ts';
import { log } from '../log.ts';
import { CHAIN_FAMILIES, parseWalletAddress, type ChainFamily } from './address.ts';
import { MAX_MESSAGE_LENGTH } from './sign-in-message.ts';
import { decodeEvmSignature, decodeSolanaSignature, EVM_SIGNATURE_BYTES } from './signature-encoding.ts';

/** Request bodies of the wallet-link endpoints are small; anything bigger is not a real client. */
export const WALLET_BODY_MAX_BYTES = 32 * 1024;

const address = z.string().min(1).max(100);
const chainId = z.number().int().positive();
const cluster = z.string().min(1).max(64);
const message = z.string().min(1).max(MAX_MESSAGE_LENGTH);
// Contract-wallet signatures can be long: an ERC-6492 one carries the call that deploys its account.
const signature = z.string().min(1).max(16_384);

// What the OpenAPI document says of each field, beyond its shape. Validation does not run these
// patterns through zod: parse*Request checks the same rules below (checkWallet, decode*Signature)
// to answer the codes that name them (invalid_address, unsupported_chain); tests/conformance checks
// that the server refuses exactly what the document refuses.
const evmAddressDoc = {
  pattern: '^0x[0-9a-fA-F]{40}$',
  description: 'EIP-55: all lower case, all upper case, or mixed case that is a correct EIP-55 checksum (400 `invalid_address` otherwise).',
};
const solanaAddressDoc = {
  pattern: '^[1-9A-HJ-NP-Za-km-z]{32,44}$',
  description: 'Base58 of a 32-byte ed25519 public key: it decodes to exactly 32 bytes that are a point on the curve (400 `invalid_address` otherwise).',
};
/**
 * An EVM signature's shape is hex bytes of any length, the one rule decodeEvmSignature holds every
 * signature to (400 invalid_request otherwise): a Safe's 65 bytes with v 31/32, or a contract's
 * signature of any length, is for the wallet's key or its contract to judge, not a shape error.
 * What happens to a contract wallet's signature depends on the chain (an RPC in
 * WALLET_EVM_RPC_URLS or not), so the description is built from the configuration, naming chains,
 * never where their RPC is nor the setting (the document is public).
 */
function evmSignatureDoc(networks: Pick<Config['wallet'], 'evmChainIds' | 'evmRpcUrls'> | 'any deployment') {
  const chains = (ids: number[]) => `${ids.length === 1 ? 'chain' : 'chains'} ${ids.join(', ')}`;
  const capitalized = (text: string) => text[0]!.toUpperCase() + text.slice(1);
  const checkedThere = 'it is checked on that chain through its RPC: 422 `invalid_signature` if the contract refuses it, 503 `chain_unavailable` if the RPC does not answer';
  const uncheckedThere = '422 `unsupported_signature_type` (`invalid_signature` for 65 bytes)';
  let contractWallets: string[];
  if (networks === 'any deployment') {
    contractWallets = [`on a chain whose contract wallets the deployment checks, ${checkedThere}; on another, ${uncheckedThere}.`];
  } else {
    const checked = networks.evmChainIds.filter((id) => networks.evmRpcUrls.has(id));
    const unchecked = networks.evmChainIds.filter((id) => !networks.evmRpcUrls.has(id));
    contractWallets = [
      ...(checked.length > 0 ? [`on ${chains(checked)} ${checkedThere}.`] : []),
      ...(unchecked.length > 0 ? [`${capitalized(chains(unchecked))} ${unchecked.length === 1 ? 'has' : 'have'} no contract-wallet checks here, so there it is ${uncheckedThere}.`] : []),
    ];
  }
  return {
    pattern: EVM_SIGNATURE_PATTERN,
    description: [
      'personal_sign (EIP-191) of `message`, as hex bytes: `0x` and an even number of hex digits (400 `invalid_request` otherwise).',
      'An ordinary wallet\'s is 65 bytes (r, s, v) that recover `address`, checked offline.',
      'Any other signature (another length, ERC-6492\'s magic suffix, or 65 bytes that do not recover `address`, such as a Safe\'s with v 31 or 32) is a smart-contract wallet\'s (ERC-1271/ERC-6492):',
      ...contractWallets,
      'ERC-8010 (EIP-7702 delegation) signatures: 422 `unsupported_signature_type`.',
    ].join(' '),
  };
}
const EVM_SIGNATURE_PATTERN = '^0x(?:[0-9a-fA-F]{2})+$';

/**
 * The EVM signature's description with no deployment's chains in it, for the typed client, which
 * serves any deployment (scripts/client-generate.ts): the field whose pattern is the EVM
 * signature's gets it.
 */
export const evmSignatureForAnyDeployment = { pattern: EVM_SIGNATURE_PATTERN, description: evmSignatureDoc('any deployment').description };
const solanaSignatureDoc = {
  pattern: '^[1-9A-HJ-NP-Za-km-z]{64,88}$',
  description: 'ed25519 signature of the UTF-8 `message`, base58: it decodes to exactly 64 bytes (400 `invalid_request` otherwise).',
};

type WalletConfig = { wallet: Pick<Config['wallet'], 'evmChainIds' | 'solanaClusters' | 'evmRpcUrls'> };

/**
 * The request bodies of the wallet-link endpoints. Without `networks` they are what validation runs;
 * with them (the OpenAPI document) `chainId` and `cluster` list the configured networks, the same
 * lists checkWallet accepts, and the fields carry the rules above.
 */
export function walletBodySchemas(networks?: WalletConfig['wallet']) {
  const documented = networks !== undefined;
  const evm = {
    chain: z.literal('evm'),
    address: documented ? address.meta(evmAddressDoc) : address,
    chainId: documented ? chainId.meta({ enum: networks.evmChainIds, description: 'One of the EVM chains this deployment accepts (400 `unsupported_chain` otherwise)' }) : chainId,
  };
  const solana = {
    chain: z.literal('solana'),
    address: documented ? address.meta(solanaAddressDoc) : address,
    cluster: documented ? cluster.meta({ enum: networks.solanaClusters, description: 'One of the Solana clusters this deployment accepts (400 `unsupported_chain` otherwise)' }) : cluster,
  };
  const signed = (signatureDoc: { pattern: string; description: string } | undefined) => ({
    message: documented ? message.meta({ description: 'The challenge\'s `message`, exactly as issued' }) : message,
    signature: signatureDoc ? signature.meta(signatureDoc) : signature,
  });
  return {
    /** POST /api/wallet-link/challenge */
    challenge: z.discriminatedUnion('chain', [z.strictObject(evm), z.strictObject(solana)]),
    /** POST /api/wallet-link: the contract's `{ payload }`, holding the signed challenge. */
    link: z.strictObject({
      payload: z.discriminatedUnion('chain', [
        z.strictObject({ ...evm, ...signed(documented ? evmSignatureDoc(networks) : undefined) }),
        z.strictObject({ ...solana, ...signed(documented ? solanaSignatureDoc : undefined) }),
      ]),
    }),
  };
}

export const { challenge: createChallengeBodySchema, link: createLinkBodySchema } = walletBodySchemas();

export type ChallengeInput =
  | { chain: 'evm'; address: string; addressKey: string; chainId: number }
  | { chain: 'solana'; address: string; addressKey: string; cluster: string };

export type LinkInput = ChallengeInput & { message: string; signature: Uint8Array };

/**
 * Validate a challenge request: shape (400 invalid_request), chain family and network on the
 * allow-list (400 unsupported_chain), address (400 invalid_address). Returns the canonical address.
 */
export function parseChallengeRequest(body: unknown, config: WalletConfig): ChallengeInput {
  assertKnownChainFamily(body, 'chain');
  const request = parseWithSchema(createChallengeBodySchema, body);
  return checkWallet(request, config, '');
}

/**
 * Validate a link request as above, plus the signature encoding (400). A signature that can only
 * be a smart-contract wallet's (not 65 bytes) on a chain with no RPC to check it is 422
 * unsupported_signature_type, naming the chain and the variable that would enable it.
 */
export function parseLinkRequest(body: unknown, config: WalletConfig): LinkInput {
  if (isRecord(body)) assertKnownChainFamily(body.payload, 'payload.chain');
  const { payload } = parseWithSchema(createLinkBodySchema, body);
  const decoded = payload.chain === 'evm' ? decodeEvmSignature(payload.signature) : decodeSolanaSignature(payload.signature);
  const signatureRefusals: FieldRefusal[] = decoded.ok ? [] : [{ code: decoded.code, path: 'payload.signature', message: decoded.reason }];
  const wallet = checkWallet(payload, config, 'payload.', signatureRefusals);
  if (!decoded.ok) throw refusedFields(signatureRefusals); // (checkWallet has, with the others)
  if (payload.chain === 'evm' && decoded.bytes.length !== EVM_SIGNATURE_BYTES && !config.wallet.evmRpcUrls.has(payload.chainId)) {
    const detail = notAKeySignature(decoded.bytes.length, payload.chainId);
    throw new DomainError('unsupported_signature_type', detail, { errors: [{ path: 'payload.signature', message: detail }] });
  }
  return { ...wallet, message: payload.message, signature: decoded.bytes };
}

/**
 * Why a contract wallet cannot link on this chain, for the caller; what would change that is the
 * operator's business, so it goes to the log (an answer names no setting). `signature` says what was
 * sent: one only a contract makes (not 65 bytes), or an ordinary wallet's 65 bytes that its key did
 * not make (a wrong key or a changed message, far more often than a contract's): the log says which,
 * so an operator does not read every mistyped signature as a smart-contract wallet turned away.
 */
export function noContractWallets(chainId: number, signature: 'contract-sized' | 'not-the-key'): string {
  if (signature === 'contract-sized') {
    log.info({ chainId }, `a signature that is not 65 bytes (a smart-contract wallet's, or a malformed one) came for chain ${chainId}, which has no RPC: add one to WALLET_EVM_RPC_URLS (${chainId}=https://...) to check smart-contract wallets there`);
  } else {
    log.info({ chainId }, `a signature on chain ${chainId} was not made by the address's key (a wrong key or message; only if it came from a smart-contract wallet would an RPC for chain ${chainId} in WALLET_EVM_RPC_URLS help)`);
  }
  return `Smart-contract wallets are checked on their chain, and this service does not check them on chain ${chainId}: ` +
    'link an ordinary wallet there, or this wallet on a chain where smart-contract wallets are accepted.';
}

/**
 * An EVM signature that is not 65 bytes, where no contract wallet is checked: an account's key
 * always signs 65 bytes, so it is a smart-contract wallet's or no signature at all (a truncated
 * copy, `0x00`); the answer says what it is not, rather than guess which.
 */
export function notAKeySignature(bytes: number, chainId: number): string {
  return `This ${bytes}-byte signature is not an account key's (65 bytes), so only a smart-contract wallet's check (ERC-1271/ERC-6492) could accept it. ${noContractWallets(chainId, 'contract-sized')}`;
}

type WalletFields = { chain: 'evm'; address: string; chainId: number } | { chain: 'solana'; address: string; cluster: string };

/** A field of a well-shaped request that is refused, with the code it would answer alone. */
type FieldRefusal = { code: DomainErrorCode; path: string; message: string };

/** The refusal of `refusals` (at least one): the first's code and detail, every one in `errors`. */
function refusedFields(refusals: FieldRefusal[]): DomainError {
  const [first] = refusals;
  return new DomainError(first!.code, first!.message, { errors: refusals.map(({ path, message }) => ({ path, message })) });
}

/**
 * The network, the address and (`more`) the signature's encoding, all checked before any is
 * refused, so that `errors` names every one that fails (a client fixes them in one go); the first
 * (network, then address, then signature) gives the answer its code and detail.
 */
function checkWallet(request: WalletFields, config: WalletConfig, prefix: string, more: FieldRefusal[] = []): ChallengeInput {
  const refusals: FieldRefusal[] = [];
  if (request.chain === 'evm' && !config.wallet.evmChainIds.includes(request.chainId)) {
    const detail = `EVM chain ${request.chainId} is not accepted here; use one of: ${config.wallet.evmChainIds.join(', ')}.`;
    refusals.push({ code: 'unsupported_chain', path: `${prefix}chainId`, message: detail });
  }
  if (request.chain === 'solana' && !config.wallet.solanaClusters.includes(request.cluster)) {
    const detail = `Solana cluster "${request.cluster}" is not accepted here; use one of: ${config.wallet.solanaClusters.join(', ')}.`;
    refusals.push({ code: 'unsupported_chain', path: `${prefix}cluster`, message: detail });
  }
  const parsed = parseWalletAddress(request.chain, request.address);
  if (!parsed.ok) refusals.push({ code: 'invalid_address', path: `${prefix}address`, message: parsed.reason });
  refusals.push(...more);
  if (refusals.length > 0 || !parsed.ok) throw refusedFields(refusals);
  return request.chain === 'evm'
    ? { chain: 'evm', address: parsed.address, addressKey: parsed.addressKey, chainId: request.chainId }
    : { chain: 'solana', address: parsed.address, addressKey: parsed.addressKey, cluster: request.cluster };
}

/** A chain family we do not know is "chain not allowed", not a generic shape error. */
function assertKnownChainFamily(value: unknown, path: string): void {
  if (!isRecord(value) || typeof value.chain !== 'string') return;
  if (!CHAIN_FAMILIES.includes(value.chain as ChainFamily)) {
    const detail = `Chain "${value.chain.slice(0, 40)}" is not supported; use "evm" or "solana".`;
    throw new DomainError('unsupported_chain', detail, { errors: [{ path, message: detail }] });
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
