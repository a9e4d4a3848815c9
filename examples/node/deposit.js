// node deposit.js 10: read the balance, add in JavaScript, write the sum (lost update).
// node deposit.js --locked 10: the same with SELECT ... FOR UPDATE in one transaction.
const { pool, withTx, main } = require('./tx');

const args = process.argv.slice(2);
const locked = args[0] === '--locked';
const amount = Number(args[args.length - 1]);

async function depositReadComputeWrite() {
  const { rows } = await pool.query('SELECT balance FROM accounts WHERE id = $1', [1]);
  await pool.query('UPDATE accounts SET balance = $1 WHERE id = $2', [rows[0].balance + amount, 1]);
}

async function depositLocked() {
  await withTx(async (c) => {
    const { rows } = await c.query('SELECT balance FROM accounts WHERE id = $1 FOR UPDATE', [1]);
    await c.query('UPDATE accounts SET balance = $1 WHERE id = $2', [rows[0].balance + amount, 1]);
  });
}

main(locked ? depositLocked : depositReadComputeWrite);
