"""Inputs of the tiny test model, shared by the training tests and their fixtures."""

# A few seed-like texts: enough for the BPE trainer to learn merges, small enough to build in well under a second.
TINY_TEXTS = (
    "Solve the problem. Show your reasoning, then give the final answer on its own line as '#### <number>'.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May?",
    "Natalia sold 48/2 = 24 clips in May. Natalia sold 48+24 = 72 clips altogether.\n#### 72",
    'Extract the fields as JSON: {"name": "Ada", "age": 36}',
    "SELECT name, SUM(amount) FROM orders GROUP BY name ORDER BY name;",
    "def add(a: int, b: int) -> int:\n    return a + b\n",
)
# Small enough to build and serve fast on two shared cores; the shape is the quickstart's, only narrower.
TINY_SIZES = {"hidden_size": 32, "num_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
# Single-turn tasks the tiny model samples: chat messages and a plain string prompt, two verifiers.
TINY_TASKS = [
    {
        "task_id": "add",
        "family": "arithmetic",
        "prompt": [{"role": "system", "content": "Answer as '#### <n>'."}, {"role": "user", "content": "2 + 3?"}],
        "verifier": {"name": "numeric_answer", "params": {"answer": 5}},
    },
    {
        "task_id": "json",
        "family": "json_extraction",
        "prompt": 'Extract the fields as JSON: {"name": "Ada", "age": 36}',
        "verifier": {"name": "json_valid", "params": {}},
    },
    {
        "task_id": "clips",
        "family": "arithmetic",
        "prompt": [{"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. Total?"}],
        "verifier": {"name": "numeric_answer", "params": {"answer": 72}},
    },
]
