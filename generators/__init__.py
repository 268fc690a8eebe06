"""Seed -> task variants: programmatic generators per family and LLM rewrites. Pure Python: no Dagster here."""
