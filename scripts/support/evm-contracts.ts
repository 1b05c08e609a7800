import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { Abi, Hex } from 'viem';

/**
 * The test contracts (scripts/support/contracts/*.sol), compiled from source with solc-js (the `solc` npm
 * package: the Solidity compiler built to WebAssembly, nothing downloaded) against
 * @openzeppelin/contracts from npm. Compiling takes about 10 s, so the output is cached under
 * node_modules/.cache, keyed by everything that decides it: the sources, every file they import,
 * the compiler version and the settings. A fresh clone compiles once (tests/setup/contracts.ts
 * does it before the suites start); editing a contract or upgrading solc or OpenZeppelin compiles again.
 */
export interface CompiledContract {
  abi: Abi;
  bytecode: Hex;
}

export type TestContracts = Record<'SmartAccount' | 'SmartAccountFactory' | 'HostileFactory', CompiledContract>;

const ROOT = process.cwd();
const SOURCES = ['scripts/support/contracts/SmartAccount.sol', 'scripts/support/contracts/HostileFactory.sol'];
const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  // Anvil's default hardfork runs it (PUSH0, MCOPY); no chain ever sees these contracts.
  evmVersion: 'prague',
  outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
};
const CACHE_DIR = path.join(ROOT, 'node_modules', '.cache', 'account-link-test-contracts');

const require = createRequire(import.meta.url);

let loaded: TestContracts | undefined;

/** The compiled test contracts, from the cache when nothing that decides them changed. */
export function testContracts(): TestContracts {
  if (loaded) return loaded;
  const sources = Object.fromEntries(SOURCES.map((file) => [path.basename(file), readFileSync(path.join(ROOT, file), 'utf8')]));
  const imports = collectImports(sources);
  const solcVersion = (require('solc/package.json') as { version: string }).version;
  const key = createHash('sha256')
    .update(JSON.stringify({ solcVersion, SETTINGS, sources, imports }))
    .digest('hex')
    .slice(0, 24);
  const cacheFile = path.join(CACHE_DIR, `${key}.json`);
  try {
    loaded = JSON.parse(readFileSync(cacheFile, 'utf8')) as TestContracts;
    return loaded;
  } catch {
    // not compiled yet
  }
  loaded = compile(sources, imports);
  mkdirSync(CACHE_DIR, { recursive: true });
  const temporary = `${cacheFile}.${process.pid}.tmp`;
  writeFileSync(temporary, JSON.stringify(loaded));
  renameSync(temporary, cacheFile); // atomic: a concurrent reader sees all of it or nothing
  return loaded;
}

/** Every file reachable through `import "...";` from the sources, by import path (from node_modules). */
function collectImports(sources: Record<string, string>): Record<string, string> {
  const found: Record<string, string> = {};
  const pending = Object.entries(sources).map(([name, text]) => ({ name, text }));
  while (pending.length > 0) {
    const { name, text } = pending.pop()!;
    for (const match of text.matchAll(/^\s*import\s+(?:[^"']*\s+from\s+)?["']([^"']+)["']\s*;/gm)) {
      const specifier = match[1]!;
      const resolved = specifier.startsWith('.') ? path.posix.normalize(path.posix.join(path.posix.dirname(name), specifier)) : specifier;
      if (resolved in found || resolved in sources) continue;
      const contents = readFileSync(require.resolve(resolved), 'utf8');
      found[resolved] = contents;
      pending.push({ name: resolved, text: contents });
    }
  }
  return found;
}

interface SolcOutput {
  errors?: { severity: string; formattedMessage: string }[];
  contracts: Record<string, Record<string, { abi: Abi; evm: { bytecode: { object: string } } }>>;
}

function compile(sources: Record<string, string>, imports: Record<string, string>): TestContracts {
  const solc = require('solc') as { compile(input: string, callbacks?: { import(path: string): { contents: string } | { error: string } }): string };
  const input = { language: 'Solidity', sources: Object.fromEntries(Object.entries(sources).map(([name, content]) => [name, { content }])), settings: SETTINGS };
  const output = JSON.parse(
    solc.compile(JSON.stringify(input), {
      import: (specifier) => (specifier in imports ? { contents: imports[specifier]! } : { error: `not found: ${specifier}` }),
    }),
  ) as SolcOutput;
  const errors = (output.errors ?? []).filter((error) => error.severity === 'error');
  if (errors.length > 0) throw new Error(`solc failed:\n${errors.map((error) => error.formattedMessage).join('\n')}`);
  const contract = (name: keyof TestContracts, file = 'SmartAccount.sol'): CompiledContract => {
    const compiled = output.contracts[file]?.[name];
    if (!compiled) throw new Error(`solc produced no ${name}`);
    return { abi: compiled.abi, bytecode: `0x${compiled.evm.bytecode.object}` };
  };
  return { SmartAccount: contract('SmartAccount'), SmartAccountFactory: contract('SmartAccountFactory'), HostileFactory: contract('HostileFactory', 'HostileFactory.sol') };
}
