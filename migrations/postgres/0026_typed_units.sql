-- A run's pool units and the run a preemption's victim stops for (issue 38) are typed fields of
-- its params, `units` ({"gpu": ["1", "2"]}) and `preempted_by` (a run id), no longer template
-- variables in `params.resolved` (`pool.gpu` = "1,2", `preempted_by`) read back as text. The
-- stages' `{pool.NAME}` values are derived from `units`. Every value moves; nothing else changes.
UPDATE runs SET params = (
    (params::jsonb - 'resolved')
    || jsonb_build_object('resolved', COALESCE((
        SELECT jsonb_object_agg(key, value) FROM jsonb_each(params::jsonb -> 'resolved')
        WHERE left(key, 5) <> 'pool.'), '{}'::jsonb))
    || jsonb_build_object('units', (
        SELECT jsonb_object_agg(substr(key, 6), CASE WHEN value #>> '{}' = '' THEN '[]'::jsonb
            ELSE to_jsonb(string_to_array(value #>> '{}', ',')) END)
        FROM jsonb_each(params::jsonb -> 'resolved') WHERE left(key, 5) = 'pool.'))
)::text
WHERE EXISTS (SELECT 1 FROM jsonb_each(runs.params::jsonb -> 'resolved') WHERE left(key, 5) = 'pool.');

UPDATE runs SET params = jsonb_set(
    params::jsonb #- '{resolved,preempted_by}', '{preempted_by}', params::jsonb #> '{resolved,preempted_by}'
)::text
WHERE length(params::jsonb #>> '{resolved,preempted_by}') = 36;
