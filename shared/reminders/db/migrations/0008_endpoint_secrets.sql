-- Webhook signing secrets at rest: envelope encryption, and a second secret for rotation.
--
-- Each secret is sealed with AES-GCM under a data key; the data key is stored wrapped by the
-- KMS key named beside it (GenerateDataKey / Decrypt). During a rotation the next secret is
-- kept beside the current one: until next_secret_from every send carries both signatures, and
-- from then on only the next one's, until `reminders endpoints rotate-secret --finish` (or the
-- next rotation) makes it the current secret.
--
-- Old code keeps working while this applies and until it is replaced: it writes and reads the
-- plaintext column, which stays (now nullable). New code never writes it; it reads it only for
-- rows not yet encrypted, which `reminders endpoints encrypt-secrets` converts in batches.
alter table endpoints
    alter column secret drop not null,
    add column secret_ciphertext      bytea,
    add column secret_data_key        bytea,
    add column secret_key_id          text,
    add column next_secret_ciphertext bytea,
    add column next_secret_data_key   bytea,
    add column next_secret_key_id     text,
    add column overlap_until          timestamptz,
    add column updated_at             timestamptz;

alter table endpoints
    add constraint endpoints_secret_present check (
        secret is not null or secret_ciphertext is not null),
    add constraint endpoints_secret_sealed_whole check (
        (secret_ciphertext is null) = (secret_data_key is null)
        and (secret_ciphertext is null) = (secret_key_id is null)),
    add constraint endpoints_next_secret_sealed_whole check (
        (next_secret_ciphertext is null) = (next_secret_data_key is null)
        and (next_secret_ciphertext is null) = (next_secret_key_id is null)
        and (next_secret_ciphertext is null) = (overlap_until is null));

-- The rows `encrypt-secrets` still has to convert, found without walking the encrypted ones.
create index endpoints_plaintext on endpoints (id) where secret is not null;
