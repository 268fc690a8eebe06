"""Curation: what the graph keeps, and on which side of the split it lands. Pure Python: no Dagster here.

- `dedup`: exact + MinHash near-duplicate labels, and the persisted index of accepted tasks.
- `curate`: the dedup key of a task and the rows the index learns.
- `validity`: which checked tasks are valid, their reject rows and validity rates; `shards`: validation split
  into steps by task-id hash ranges, and their verdicts merged back in input order.
- `splits`: lineage-grouped train/eval assignment; `split_ledger`: the append-only ledger that keeps each root on
  its side across nights.
- `vouching`: which LLM-written tasks the splits may keep (their generator's current checks, or a judge in use).
- `admission`: which judged tasks a night's split admits, and which it holds back with a reason.
- `manifests`: the task ids each checkpoint trained on, and the leaks an eval split would have against them.
"""
