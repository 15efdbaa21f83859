import { defineConfig } from 'drizzle-kit';

/** `npm run db:generate` writes the PostgreSQL migrations from src/db/schema/postgres.ts. */
export default defineConfig({
  dialect: 'postgresql',
  schema: './src/db/schema/postgres.ts',
  out: './drizzle/postgres',
});
