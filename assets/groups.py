"""Asset group names: one group per stage of the flywheel."""

SEEDS = "seeds"
GENERATION = "generation"
CURATION = "curation"
JUDGING = "judging"
TRAINING = "training"
EVALUATION = "evaluation"
FAILURES = "failures"
