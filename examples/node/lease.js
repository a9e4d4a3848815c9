// The documents' Redis lock (SET lock:invoice:42 <token> NX PX 30000), in node-redis.
// node lease.js A: take the lock, send the invoice, release it with GET then DEL (DL-12's bug:
//   between the two, the lease can run out and another worker take the lock; A's DEL is theirs)
// node lease.js A --cad: release it with the documents' compare-and-delete in Lua (the fix)
// node lease.js B --check: take the lock and, as a job does before it commits, check that it
//   still holds it: exit 1 if the lock is gone or someone else's.
const { createClient } = require('redis');

const KEY = 'lock:invoice:42';
const CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
const [token, mode] = process.argv.slice(2);

async function run(redis) {
  const taken = await redis.set(KEY, token, { NX: true, PX: 30000 });
  if (taken !== 'OK') return; // busy: someone else sends this invoice
  if (mode === '--check') {
    const holder = await redis.get(KEY);
    if (holder !== token) throw new Error(`lock lost while held: ${KEY} is ${holder}`);
    return; // the job goes on; the lease ends by its TTL
  }
  // ... the invoice is sent here ...
  if (mode === '--cad') {
    await redis.eval(CAD, { keys: [KEY], arguments: [token] });
  } else if ((await redis.get(KEY)) === token) {
    await redis.del(KEY);
  }
}

async function main() {
  const redis = createClient({ url: process.env.REDIS_URL });
  await redis.connect();
  try {
    await run(redis);
  } catch (e) {
    console.error(e.message);
    process.exitCode = 1;
  } finally {
    await redis.quit();
  }
}

main();
