"""seedwheel's tasks and rewards in the shapes other engines take: verl's RL datasets and reward function, NeMo Gym's
rows and its resources servers' verify endpoint.

Pure Python, below the assets: the CLI (`seedwheel export`, `seedwheel reward-server`) and tests call it; it reads
task records and calls the one verifier registry (`validators.registry.REGISTRY`), so an engine scoring a rollout
through these shapes gets the same verdict as `seedwheel verify`.
"""
