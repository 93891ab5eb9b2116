-- reader: inspection (the views of README section 4, `status`, dashboards). Reads every table and
-- view of the schema, writes nothing.
GRANT USAGE ON SCHEMA timeout_center TO timeout_center_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA timeout_center TO timeout_center_reader;
