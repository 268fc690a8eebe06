"""People in the loop: a review page where a person checks the reward on real outputs, labels the judge, and
completes production failures into seeds.

Modules: `labels` (label files beside the seeds, reviewer agreement), `rewards` (reward labels -> reward-audit
rows, agreement per source, family and verifier), `judging` (judge labels -> calibration items), `queue` (review
items -> seed files), `sampling` (real outputs of the current policy), `server` (the page, `page.html`).
Pure Python: no Dagster here (`assets/` wires it in).
"""
