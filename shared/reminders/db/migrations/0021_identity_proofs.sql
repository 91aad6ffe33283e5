-- The operations function's identity proofs it has accepted, each once: a proof (a presigned
-- STS GetCallerIdentity bound to one command, one function and a nonce) is refused a second
-- time while it could still pass STS. Keyed by the digest the proof signs (command,
-- arguments, audience, nonce), so two uses of one proof at once meet on the primary key and
-- only one commits. Kept until `expires_at` (the proof's X-Amz-Date plus the longest a proof
-- is good for), then purged by time, a bounded batch at each invocation.
create table identity_proofs (
    digest      text primary key check (digest ~ '^[0-9a-f]{64}$'),
    caller_arn  text not null check (length(caller_arn) <= 2048),
    command     text not null check (length(command) <= 40),
    accepted_at timestamptz not null,
    expires_at  timestamptz not null
);
create index identity_proofs_expiry on identity_proofs (expires_at);
