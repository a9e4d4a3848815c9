// node checkout.js 101 202: reserve one of each product, in cart order (the bug: two
// carts with the same products in opposite orders deadlock).
// node checkout.js --sorted 202 101: the fix, locks taken in product_id order first.
const { withTx, main } = require('./tx');

const args = process.argv.slice(2);
const sorted = args[0] === '--sorted';
const items = args.filter((a) => a !== '--sorted').map((id) => ({ productId: Number(id), qty: 1 }));

async function reserveInCartOrder(items) {
  return withTx(async (c) => {
    for (const it of items) {
      const r = await c.query(
        `UPDATE inventory SET reserved = reserved + $1
         WHERE product_id = $2 AND available - reserved >= $1`,
        [it.qty, it.productId],
      );
      if (r.rowCount === 0) throw new Error(`OUT_OF_STOCK:${it.productId}`);
    }
  });
}

async function reserve(items) {
  const sorted = [...items].sort((a, b) => a.productId - b.productId);
  return withTx(async (c) => {
    const ids = sorted.map((i) => i.productId);
    await c.query(
      'SELECT product_id FROM inventory WHERE product_id = ANY($1) ORDER BY product_id FOR NO KEY UPDATE',
      [ids],
    );
    for (const it of sorted) {
      const r = await c.query(
        `UPDATE inventory SET reserved = reserved + $1
         WHERE product_id = $2 AND available - reserved >= $1`,
        [it.qty, it.productId],
      );
      if (r.rowCount === 0) throw new Error(`OUT_OF_STOCK:${it.productId}`);
    }
  });
}

main(() => (sorted ? reserve(items) : reserveInCartOrder(items)));
