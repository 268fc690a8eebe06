"""The Dagster side: definitions, resources, the Parquet IO manager, settings and the `seedwheel` CLI."""
