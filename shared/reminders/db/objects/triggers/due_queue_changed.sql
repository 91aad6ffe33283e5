-- due_queue (0013): only a change of a due delivery's state or due time (a row trigger: it
-- runs under the delivery's row lock, which orders it against the scanner's lease).
create or replace trigger due_queue_changed after update of state, due_at on deliveries
    for each row
    when ((old.state is distinct from new.state or old.due_at is distinct from new.due_at)
          and (old.state in ('scheduled', 'retrying') or new.state in ('scheduled', 'retrying')))
    execute function due_queue_changed();
