-- The request hash as the Python API computed it before 0009 (schedule's _request_hash).
create or replace function python_request_hash(
    recipients text[], channel text, destination text, kind text, payload jsonb,
    revision text, at timestamptz, rrule text, tz text, local_start timestamp, gap text,
    overlap text)
returns text
language sql immutable set search_path from current as $$
    select encode(sha256(convert_to(
        '{"at":' || coalesce(python_json_string(
                        python_timestamp(at at time zone 'UTC') || '+00:00'), 'null')
        || ',"channel":' || coalesce(python_json_string(channel), 'null')
        || ',"gap":' || coalesce(python_json_string(gap), 'null')
        || ',"kind":' || coalesce(python_json_string(kind), 'null')
        || ',"local_start":' || coalesce(python_json_string(python_timestamp(local_start)),
                                         'null')
        || ',"overlap":' || coalesce(python_json_string(overlap), 'null')
        || ',"payload":' || python_json_string(python_json(payload))
        || ',"recipients":' || python_json(to_jsonb(recipients))
        || ',"revision":' || coalesce(python_json_string(revision), 'null')
        || ',"rrule":' || coalesce(python_json_string(rrule), 'null')
        || ',"to":' || coalesce(python_json_string(destination), 'null')
        || ',"tz":' || coalesce(python_json_string(tz), 'null')
        || '}', 'UTF8')), 'hex')
$$;

revoke all on function python_request_hash(text[], text, text, text, jsonb, text, timestamptz,
    text, text, timestamp, text, text) from public;
