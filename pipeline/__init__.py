"""Pipeline construction: one pure create_pipeline() plus thin runners."""
