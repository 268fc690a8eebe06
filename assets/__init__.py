"""Thin Dagster assets and asset checks, one module per asset group."""
