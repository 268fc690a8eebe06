"""An OpenAI-compatible LLM client for generation and judging: cached on disk, bounded, retried.

```python
from generators.llm import ChatRequest, EndpointConfig, LLMCache, LLMClient, parse_json_response

config = EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-0.5B-Instruct", max_concurrency=16)
client = LLMClient(config, LLMCache(".seedwheel/llm_cache"))
results = client.complete_many_sync(
    [ChatRequest([{"role": "user", "content": "Rewrite: 2+2?"}], template_version="rewrite-v1")],
    progress=lambda done, total: print(f"{done}/{total}"),
)
client.stats.as_dict()  # hits, misses, calls, attempts, retries, tokens_in, tokens_out, errors/<code>
```

`generators.fake_server.FakeOpenAIServer` serves the same API on loopback for tests and offline dry runs.
"""

from generators.llm.cache import CachedResponse, LLMCache, cache_key, request_payload
from generators.llm.client import LLMClient
from generators.llm.parse import parse_json_response
from generators.llm.types import (
    CONNECTION_ERRORS,
    CallBudgetExceeded,
    ChatRequest,
    ChatResult,
    EndpointConfig,
    EndpointRejected,
    EndpointUnavailable,
    LLMStats,
    MissingAPIKey,
    is_loopback_url,
    resolve_api_key,
)

__all__ = [
    "CONNECTION_ERRORS",
    "CachedResponse",
    "CallBudgetExceeded",
    "ChatRequest",
    "ChatResult",
    "EndpointConfig",
    "EndpointRejected",
    "EndpointUnavailable",
    "LLMCache",
    "LLMClient",
    "LLMStats",
    "MissingAPIKey",
    "cache_key",
    "is_loopback_url",
    "parse_json_response",
    "request_payload",
    "resolve_api_key",
]
