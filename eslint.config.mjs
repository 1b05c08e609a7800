import nextVitals from 'eslint-config-next/core-web-vitals';
import nextTypescript from 'eslint-config-next/typescript';

const config = [
  ...nextVitals,
  ...nextTypescript,
  // Test helpers named use* (useTestDatabase) are not React hooks.
  { files: ['tests/**'], rules: { 'react-hooks/rules-of-hooks': 'off' } },
  { ignores: ['.next/**', 'packages/*/dist/**', '.next-bench/**', '.next-devtest/**', 'node_modules/**', '.data/**', 'next-env.d.ts', 'test-results/**', 'bench-results/**'] },
];

export default config;
