// A booking and its reminder in one transaction, from Node.js with pg.
//   cd examples/node && npm ci && DATABASE_URL=postgresql://booking_app@host/appdb node booking.js 42
'use strict';

const { Client } = require('pg');

async function book(client, booking) {
  await client.query('BEGIN');
  try {
    await client.query(
      'create table if not exists bookings (id integer primary key, ' +
        'guest text not null, starts_at timestamptz not null)');
    await client.query(
      "insert into bookings (id, guest, starts_at) values ($1, 'alice@example.com', " +
        "now() + interval '14 days')", [booking]);
    const { rows } = await client.query(
      'select schedule_key, created, recipient, delivery_key, due_at, state ' +
        'from reminders.schedule(key => $1, recipients => $2, channel => $3, ' +
        "at => now() + interval '13 days', payload => $4::jsonb)",
      [`booking-${booking}`, ['alice@example.com'], 'email', JSON.stringify({ booking })]);
    await client.query('COMMIT');
    return rows;
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  }
}

async function main() {
  const booking = Number(process.argv[2] || 42);
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    for (const row of await book(client, booking)) {
      console.log([row.schedule_key, row.created, row.recipient, row.delivery_key,
        row.due_at.toISOString(), row.state].join('\t'));
    }
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  // err.code is the SQLSTATE: RM400 bad input, RM404 not found, RM409 refused, RM403 no tenant
  console.error(`booking failed: ${err.code} ${err.message}`);
  process.exit(1);
});
