-- A run's pool units and the run a preemption's victim stops for (issue 38) are typed fields of
-- its params, `units` ({"gpu": ["1", "2"]}) and `preempted_by` (a run id), no longer template
-- variables in `params.resolved` (`pool.gpu` = "1,2", `preempted_by`) read back as text. The
-- stages' `{pool.NAME}` values are derived from `units`. Every value moves; nothing else changes.
UPDATE runs SET params = json_set(params,
    '$.units', json((
        SELECT json_group_object(substr(key, 6),
            json(CASE WHEN value = '' THEN '[]' ELSE '["' || replace(value, ',', '","') || '"]' END))
        FROM json_each(runs.params, '$.resolved') WHERE substr(key, 1, 5) = 'pool.')),
    '$.resolved', json((
        SELECT json_group_object(key, value)
        FROM json_each(runs.params, '$.resolved') WHERE substr(key, 1, 5) <> 'pool.')))
WHERE EXISTS (SELECT 1 FROM json_each(runs.params, '$.resolved') WHERE substr(key, 1, 5) = 'pool.');

UPDATE runs SET params = json_remove(
    json_set(params, '$.preempted_by', json_extract(params, '$.resolved.preempted_by')),
    '$.resolved.preempted_by')
WHERE length(json_extract(params, '$.resolved.preempted_by')) = 36;
