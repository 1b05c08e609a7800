import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';
import {
  createPublicClient,
  createWalletClient,
  defineChain,
  encodeFunctionData,
  http,
  serializeErc6492Signature,
  type Address,
  type Hex,
  type PrivateKeyAccount,
  type PublicClient,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { hashMessage as erc7739HashMessage } from 'viem/experimental/erc7739';
import { testContracts } from './evm-contracts.ts';

/**
 * A real EVM for the tests: anvil (Foundry's node, the binary shipped in the npm package
 * @foundry-rs/anvil-<platform>) on a loopback port, with the test contracts deployed: the
 * SmartAccountFactory of scripts/support/contracts/SmartAccount.sol. It starts in well under a second.
 */
export interface LocalChain {
  chainId: number;
  /** The anvil process (the bench reads its CPU time). */
  pid: number;
  /** anvil's JSON-RPC endpoint (http://127.0.0.1:<port>). */
  url: string;
  client: PublicClient;
  factory: Address;
  /** scripts/support/contracts/HostileFactory.sol: ERC-6492 "factories" that make the validator's eth_call expensive. */
  hostileFactory: Address;
  /** A smart account owned by `owner` (a new salt each call unless given); not deployed until `deploy()`. */
  smartAccount(owner: PrivateKeyAccount, salt?: Hex): Promise<SmartAccountHandle>;
  /**
   * EIP-7702: the ordinary wallet `key` delegates its address to the SmartAccount implementation,
   * initialised with `owner` as its signer (a real type-4 transaction, sent and paid by anvil's
   * dev account). The address is then both a key's and a smart account's, on this chain only.
   */
  delegate(key: PrivateKeyAccount, owner: Address): Promise<Pick<SmartAccountHandle, 'address' | 'signWith'>>;
  /**
   * A "wallet" of HostileFactory, never deployed: its ERC-6492 signature makes the validator deploy
   * it in the eth_call and ask it, and it answers by reverting with `revertBytes` bytes, or (0) by
   * spending all the gas the call has.
   */
  hostileAccount(revertBytes: bigint): Promise<{ address: Address; signCounterfactual(message: string): Promise<Hex> }>;
  stop(): Promise<void>;
}

export interface SmartAccountHandle {
  address: Address;
  owner: PrivateKeyAccount;
  /** What the wallet answers to personal_sign: the owner's ERC-7739 signature for this account. */
  sign(message: string): Promise<Hex>;
  /** The same scheme for this account, made by another key (which does not own it, unless rotated to). */
  signWith(signer: PrivateKeyAccount, message: string): Promise<Hex>;
  /** The same, wrapped in ERC-6492 with the factory call that would deploy the account. */
  signCounterfactual(message: string): Promise<Hex>;
  /** Deploy the account through the factory (a real transaction, mined at once). */
  deploy(): Promise<void>;
  isDeployed(): Promise<boolean>;
  /** The account calls rotateSigner on itself (anvil impersonates it): `newOwner` owns it from now on. */
  rotateOwner(newOwner: Address): Promise<void>;
}

/** anvil's first dev account: funded on every fresh anvil chain, pays for the test deployments. */
const DEPLOYER_KEY = '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80';

const require = createRequire(import.meta.url);

/** The anvil binary of this platform, as npm installed it (an optional dependency of @foundry-rs/anvil). */
export function anvilBinary(): string {
  const os = { linux: 'linux', darwin: 'darwin', win32: 'win32' }[process.platform as string];
  const arch = { x64: 'amd64', arm64: 'arm64' }[process.arch as string];
  if (!os || !arch) throw new Error(`anvil has no npm build for ${process.platform}-${process.arch}`);
  const packageJson = require.resolve(`@foundry-rs/anvil-${os}-${arch}/package.json`);
  return path.join(path.dirname(packageJson), 'bin', process.platform === 'win32' ? 'anvil.exe' : 'anvil');
}

/**
 * `gasLimit`: the block gas limit, which is also the gas an eth_call without one may spend (anvil's
 * default is 30M; RPC providers allow far more: geth's default cap is 50M, some providers' 500M+).
 */
export async function startLocalChain({ chainId = 31337, gasLimit }: { chainId?: number; gasLimit?: bigint } = {}): Promise<LocalChain> {
  const contracts = testContracts();
  const options = ['--host', '127.0.0.1', '--port', '0', '--chain-id', String(chainId), ...(gasLimit ? ['--gas-limit', String(gasLimit)] : [])];
  const child = spawn(anvilBinary(), options, { stdio: ['ignore', 'pipe', 'pipe'] });
  const url = await listeningUrl(child);
  const chain = defineChain({ id: chainId, name: `anvil ${chainId}`, nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 }, rpcUrls: { default: { http: [url] } } });
  const client = createPublicClient({ chain, transport: http(url), pollingInterval: 20 });
  const deployer = createWalletClient({ chain, account: privateKeyToAccount(DEPLOYER_KEY), transport: http(url) });

  const deployment = await deployer.deployContract({ abi: contracts.SmartAccountFactory.abi, bytecode: contracts.SmartAccountFactory.bytecode });
  const factory = (await client.waitForTransactionReceipt({ hash: deployment })).contractAddress!;
  const factoryAbi = contracts.SmartAccountFactory.abi;
  // Deployed second, so the first (the account factory) has the same address on every test chain.
  const hostileDeployment = await deployer.deployContract({ abi: contracts.HostileFactory.abi, bytecode: contracts.HostileFactory.bytecode });
  const hostileFactory = (await client.waitForTransactionReceipt({ hash: hostileDeployment })).contractAddress!;

  /** How a SmartAccount at `address` on this chain answers personal_sign: ERC-7739, made by `signer`. */
  const signerFor = (address: Address) => (signer: PrivateKeyAccount, message: string) =>
    signer.sign({ hash: erc7739HashMessage({ message, verifierDomain: { name: 'SmartAccount', version: '1', chainId, verifyingContract: address } }) });

  async function smartAccount(owner: PrivateKeyAccount, salt: Hex = `0x${randomBytes(32).toString('hex')}`): Promise<SmartAccountHandle> {
    const address = (await client.readContract({ address: factory, abi: factoryAbi, functionName: 'accountAddress', args: [owner.address, salt] })) as Address;
    const signWith = signerFor(address);
    const sign = (message: string) => signWith(owner, message);
    return {
      address,
      owner,
      sign,
      signWith,
      signCounterfactual: async (message) =>
        serializeErc6492Signature({
          address: factory,
          data: encodeFunctionData({ abi: factoryAbi, functionName: 'createAccount', args: [owner.address, salt] }),
          signature: await sign(message),
        }),
      deploy: async () => {
        const hash = await deployer.writeContract({ address: factory, abi: factoryAbi, functionName: 'createAccount', args: [owner.address, salt] });
        await client.waitForTransactionReceipt({ hash });
      },
      isDeployed: async () => ((await client.getCode({ address })) ?? '0x') !== '0x',
      rotateOwner: async (newOwner) => {
        await client.request({ method: 'anvil_setBalance' as never, params: [address, '0xde0b6b3a7640000'] as never });
        await client.request({ method: 'anvil_impersonateAccount' as never, params: [address] as never });
        const self = createWalletClient({ chain, account: address, transport: http(url) });
        const hash = await self.writeContract({ address, abi: contracts.SmartAccount.abi, functionName: 'rotateSigner', args: [newOwner] });
        await client.waitForTransactionReceipt({ hash });
        await client.request({ method: 'anvil_stopImpersonatingAccount' as never, params: [address] as never });
      },
    };
  }

  async function delegate(key: PrivateKeyAccount, owner: Address) {
    const implementation = (await client.readContract({ address: factory, abi: factoryAbi, functionName: 'implementation' })) as Address;
    const authorization = await deployer.signAuthorization({ account: key, contractAddress: implementation });
    const hash = await deployer.writeContract({
      address: key.address, abi: contracts.SmartAccount.abi, functionName: 'initialize', args: [owner], authorizationList: [authorization],
    });
    await client.waitForTransactionReceipt({ hash });
    return { address: key.address, signWith: signerFor(key.address) };
  }

  async function hostileAccount(revertBytes: bigint) {
    const abi = contracts.HostileFactory.abi;
    const salt: Hex = `0x${randomBytes(32).toString('hex')}`;
    const address = (await client.readContract({ address: hostileFactory, abi, functionName: 'accountAddress', args: [revertBytes, salt] })) as Address;
    return {
      address,
      // The signature inside is any 65 bytes: the account never gets to judge it.
      signCounterfactual: async () => serializeErc6492Signature({
        address: hostileFactory,
        data: encodeFunctionData({ abi, functionName: 'createAccount', args: [revertBytes, salt] }),
        signature: `0x${'11'.repeat(65)}`,
      }),
    };
  }

  return {
    chainId,
    pid: child.pid!,
    url,
    client,
    factory,
    hostileFactory,
    smartAccount,
    delegate,
    hostileAccount,
    stop: () => stopChild(child),
  };
}

/** anvil prints "Listening on 127.0.0.1:<port>" once it accepts requests. */
function listeningUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => reject(new Error(`anvil did not start within 15 s:\n${output}`)), 15_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /Listening on ([\d.]+:\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        output = '';
        resolve(`http://${match[1]}`);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`anvil exited (${code}) before listening:\n${output}`));
    });
  });
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

export type RpcProxyMode = 'forward' | 'hang' | 'http-error' | 'rpc-error' | 'geth-revert';

/**
 * A loopback HTTP server in front of a chain's RPC, as the service sees an RPC provider: it counts
 * every request (and the JSON-RPC methods in it), and can misbehave on demand: `hang` never
 * answers (a provider that is slow or stuck), `http-error` answers 503, `rpc-error` answers a
 * JSON-RPC internal error (-32603) as providers do when their backend fails, `geth-revert`
 * answers that the call reverted the way geth words it (-32000 "execution reverted").
 */
export interface RpcProxy {
  url: string;
  mode: RpcProxyMode;
  /** HTTP requests received since the last reset. */
  requests: number;
  /** JSON-RPC methods received since the last reset, in order. */
  methods: string[];
  /** The Authorization header of each request since the last reset. */
  authorizations: (string | undefined)[];
  /** The `gas` of each eth_call since the last reset (undefined: none was sent). */
  callGas: (string | undefined)[];
  /** The size in bytes of each answer forwarded from the chain since the last reset. */
  answerBytes: number[];
  reset(): void;
  close(): Promise<void>;
}

export async function startRpcProxy(target: string): Promise<RpcProxy> {
  const targetUrl = new URL(target);
  const hanging = new Set<IncomingMessage>();
  const proxy: RpcProxy = {
    url: '',
    mode: 'forward',
    requests: 0,
    methods: [],
    authorizations: [],
    callGas: [],
    answerBytes: [],
    reset() {
      proxy.requests = 0;
      proxy.methods = [];
      proxy.authorizations = [];
      proxy.callGas = [];
      proxy.answerBytes = [];
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const request of hanging) request.socket.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  const server: Server = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    proxy.requests += 1;
    proxy.authorizations.push(request.headers.authorization);
    try {
      type Call = { method?: string; id?: unknown; params?: { gas?: string }[] };
      const parsed = JSON.parse(body.toString()) as Call | Call[];
      for (const call of Array.isArray(parsed) ? parsed : [parsed]) {
        proxy.methods.push(String(call.method));
        if (call.method === 'eth_call') proxy.callGas.push(call.params?.[0]?.gas);
      }
    } catch {
      proxy.methods.push('(not JSON)');
    }
    switch (proxy.mode) {
      case 'hang':
        hanging.add(request);
        request.socket.once('close', () => hanging.delete(request));
        return;
      case 'http-error':
        response.writeHead(503, { 'content-type': 'text/plain' }).end('upstream unavailable');
        return;
      case 'rpc-error':
      case 'geth-revert': {
        const id = (JSON.parse(body.toString()) as { id?: unknown }).id ?? null;
        const error = proxy.mode === 'rpc-error' ? { code: -32603, message: 'internal error' } : { code: -32000, message: 'execution reverted' };
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id, error }));
        return;
      }
      default: {
        const upstream = httpRequest({ host: targetUrl.hostname, port: targetUrl.port, path: '/', method: 'POST', headers: { 'content-type': 'application/json' } }, (answer) => {
          response.writeHead(answer.statusCode ?? 502, { 'content-type': answer.headers['content-type'] ?? 'application/json' });
          let bytes = 0;
          answer.on('data', (chunk: Buffer) => {
            bytes += chunk.length;
          });
          answer.on('close', () => proxy.answerBytes.push(bytes));
          answer.pipe(response);
        });
        upstream.on('error', () => response.writeHead(502).end());
        upstream.end(body);
      }
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const address = server.address() as { port: number };
  proxy.url = `http://127.0.0.1:${address.port}/`;
  return proxy;
}
