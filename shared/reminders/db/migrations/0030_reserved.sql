-- Placeholder for migration 0030, whose number belongs to another branch: migrations are
-- numbered without gaps, and this branch's own is 0031. Delete this file when that branch's
-- 0030 is merged.
select 1;
