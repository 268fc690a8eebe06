"""An OpenAI-compatible LLM client for generation and judging: cached on disk, bounded, retried.

```python
from langmodels import ChatRequest, EndpointConfig, LLMCache, LLMClient

config = EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-0.5B-Instruct", max_concurrency=16)
client = LLMClient(config, LLMCache(".seedwheel/llm_cache"))
results = client.complete_many_sync(
    [ChatRequest([{"role": "user", "content": "Rewrite: 2+2?"}], template_version="rewrite-v1")],
    progress=lambda done, total: print(f"{done}/{total}"),
)
client.stats.as_dict()  # hits, misses, calls, attempts, retries, tokens_in, tokens_out, errors/<code>
```

`Endpoint` hands out clients for a URL, or for a local server it starts only when a request misses the cache:

```python
from langmodels import Endpoint, EndpointConfig

with Endpoint(EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="m"), cache=".seedwheel/llm_cache") as ep:
    results = ep.client().complete_many_sync(requests)
```

`tests.fake_server.FakeOpenAIServer` serves the same API on loopback for tests and offline dry runs.
"""

from langmodels.cache import CachedResponse, LLMCache, cache_key, cache_keys, request_payload
from langmodels.client import LLMClient
from langmodels.endpoint import LOCAL_PLACEHOLDER_URL, Endpoint, LocalServer
from langmodels.types import (
    CONNECTION_ERRORS,
    CallBudgetExceeded,
    ChatRequest,
    ChatResult,
    EndpointConfig,
    EndpointConfigError,
    EndpointRejected,
    EndpointUnavailable,
    LLMStats,
    MissingAPIKey,
    is_loopback_url,
    resolve_api_key,
)

__all__ = [
    "CONNECTION_ERRORS",
    "LOCAL_PLACEHOLDER_URL",
    "CachedResponse",
    "CallBudgetExceeded",
    "ChatRequest",
    "ChatResult",
    "Endpoint",
    "EndpointConfig",
    "EndpointConfigError",
    "EndpointRejected",
    "EndpointUnavailable",
    "LLMCache",
    "LLMClient",
    "LLMStats",
    "LocalServer",
    "MissingAPIKey",
    "cache_key",
    "cache_keys",
    "is_loopback_url",
    "request_payload",
    "resolve_api_key",
]
