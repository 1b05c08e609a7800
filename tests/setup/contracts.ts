import { testContracts } from '../../scripts/support/evm-contracts.ts';

/**
 * Compile the test contracts once before the suites start (about 10 s on a fresh clone, a file read
 * after that), so suites running side by side never compile them twice.
 */
export default function setup() {
  testContracts();
}
