// @ts-check
import eslint from '@eslint/js';
import prettier from 'eslint-config-prettier/flat';
import { defineConfig, globalIgnores } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/**
 * ESLint's and typescript-eslint's recommended rules, the type-checked ones among them, over the
 * code (src, test, scripts, bench) and the configuration files at the top. Layout is Prettier's
 * (.prettierrc): eslint-config-prettier, last, turns off every rule that would disagree with it.
 */
export default defineConfig(
  // Built, downloaded or generated (src/client/openapi-types.ts: npm run openapi:generate).
  globalIgnores(['dist/', 'coverage/', 'data/', '.cache/', 'src/client/openapi-types.ts']),
  eslint.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Matching control characters is what the hits do: refusing them in input, stripping terminal escapes.
      'no-control-regex': 'off',
      // Promise.all over values of which only some are promises: the code makes a promise only where it must wait.
      '@typescript-eslint/await-thenable': ['error', { allowMixedPromiseArrays: true }],
      // Fields are left out by destructuring them beside a rest element; `_` names a value read and dropped.
      '@typescript-eslint/no-unused-vars': ['error', { ignoreRestSiblings: true, varsIgnorePattern: '^_' }],
      // Passing on an error received untyped (a caught throw, an AbortSignal's reason), as only-throw-error allows.
      '@typescript-eslint/prefer-promise-reject-errors': [
        'error',
        { allowThrowingAny: true, allowThrowingUnknown: true },
      ],
    },
  },
  {
    files: ['test/**'],
    rules: {
      // vitest's asymmetric matchers (expect.any, expect.stringContaining, ...) are typed `any` by design.
      '@typescript-eslint/no-unsafe-assignment': 'off',
    },
  },
  // Plain JavaScript (this file, test helpers run by node): outside tsconfig.json, linted without types.
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
  // The web page's modules (web/), run by browsers.
  {
    files: ['web/**/*.js'],
    languageOptions: { globals: globals.browser, sourceType: 'module' },
  },
  prettier,
);
