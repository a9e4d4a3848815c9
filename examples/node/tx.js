// The documents' transaction helper: one client for the whole transaction, BEGIN,
// lock_timeout, COMMIT, ROLLBACK on error, retry of 40P01/40001 with backoff + jitter.
// ATTEMPTS (default 1 here: a deadlock is an exit, so explore shows it) sets the tries.
const { Pool } = require('pg');

const pool = new Pool({ max: 20 }); // PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSFILE
const RETRYABLE = new Set(['40P01', '40001']); // deadlock_detected, serialization_failure

async function withTx(fn, attempts = Number(process.env.ATTEMPTS || 1)) {
  for (let i = 1; ; i++) {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await c.query("SET LOCAL lock_timeout = '3s'");
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (e) {
      await c.query('ROLLBACK').catch(() => {});
      if (RETRYABLE.has(e.code) && i < attempts) {
        await new Promise((r) => setTimeout(r, 20 * 2 ** i + Math.random() * 20));
        continue;
      }
      throw e;
    } finally {
      c.release();
    }
  }
}

async function main(work) {
  try {
    await work();
  } catch (e) {
    console.error(`${e.code || ''} ${e.message}`);
    process.exitCode = 1;
  } finally {
    await pool.end();
  }
}

module.exports = { pool, withTx, main };
